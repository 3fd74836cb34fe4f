// The controller as the collector's main loop sees it: once per window step, onStep() reads the
// job's features from the series store, asks the policy, and acts — signs and sends the decision
// to the trainer's control port (mode act) or only logs it (mode advise). A sent decision is
// re-sent every step until every rank reports its epoch (bpftrain_config_epoch); nothing is sent
// or decided while a checkpoint is being written. Every decision is one JSON line in the
// decisions log and one increment of bpftrain_controller_decisions_total{from,to,reason}.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>

#include "collector/controller/control_channel.h"
#include "collector/controller/control_mode.h"
#include "collector/controller/diagnosis.h"
#include "collector/controller/features.h"
#include "collector/controller/json_lines_log.h"
#include "collector/controller/policy.h"
#include "collector/window/series_store.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::controller {

struct ControllerConfig {
  std::string policy = "rules";  // rules | bandit
  ControlMode mode = ControlMode::kAct;
  std::string trainer_address = "127.0.0.1:9472";
  std::string secret_file;  // read with readSecretFile(); ignored when `secret` is set
  std::string secret;
  std::string job;            // empty: the job seen in the store (the first, sorted)
  std::string decisions_log;  // JSON lines, appended; empty: none
  // The features the policy saw, a JSON line every features_log_every (threshold calibration);
  // empty: none. At or below the period of the looks between steps every look is written too
  // ("look": "react", with the react window's features): how a decision's signal built up.
  std::string features_log;
  std::chrono::nanoseconds features_log_every = std::chrono::seconds(2);
  int writer = 0;  // the series store writer index reserved for the controller
  // How much recent data a decision reads (the store's full window when 0 or longer).
  std::chrono::nanoseconds window = std::chrono::seconds(1);
  // What the looks between steps (onTick) read: shorter, so that a link's RTT median turns
  // within the training step in flight (its end is the switch a decision can still catch).
  // Shorter than a window step (500 ms), a look reads the step in progress alone once it has
  // run this long (SlidingWindow::stepsBefore), else with the step before.
  std::chrono::nanoseconds react_window = std::chrono::milliseconds(250);
  // A decision the trainer has not applied after this many steps is abandoned (logged and
  // counted in bpftrain_controller_abandoned_total); the policy then decides afresh.
  int max_retries = 20;
};

struct ControllerStats {
  uint64_t decisions = 0;
  uint64_t sends = 0;
  uint64_t send_errors = 0;
  uint64_t applied = 0;
  uint64_t abandoned = 0;
  uint64_t deferred_checkpoint = 0;
};

class ControllerService {
 public:
  // `metrics` (may be null) receives the controller's own series through config.writer.
  // nullptr with `error` naming the fix on a bad policy, address, secret or log path.
  static std::unique_ptr<ControllerService> create(ControllerConfig config,
                                                   window::SeriesStore* metrics,
                                                   std::string& error);
  // For tests and custom policies.
  static std::unique_ptr<ControllerService> create(ControllerConfig config,
                                                   std::unique_ptr<Policy> policy,
                                                   window::SeriesStore* metrics,
                                                   std::string& error);
  ~ControllerService();

  void onStep(const window::SeriesStore& store, int64_t now_ns);
  // Between window steps (--controller-period): the policy's react() on fresh features, for a
  // move that cannot wait for the next step. Touches no step state: the features are not kept,
  // nothing is logged or re-sent unless it decides.
  void onTick(const window::SeriesStore& store, int64_t now_ns);

  const ControllerStats& stats() const { return stats_; }
  const Features& lastFeatures() const { return extractor_ ? extractor_->last() : empty_; }
  std::optional<uint64_t> pendingEpoch() const {
    return pending_ ? std::optional<uint64_t>(pending_->epoch) : std::nullopt;
  }
  const Policy& policy() const { return *policy_; }
  const Diagnosis& lastDiagnosis() const { return reported_; }

 private:
  struct Pending {
    uint64_t epoch;
    Arm from, to;
    int64_t decided_ns;
    int retries;
  };
  ControllerService() = default;
  void count(const metrics::MetricDef& metric, std::initializer_list<window::Label> labels,
             double value, int64_t now_ns);
  void send(const Pending& p, int64_t now_ns);
  void diagnose(const Features& f, int64_t now_ns);
  // Exports and logs `d` when it differs from the diagnosis last reported.
  void report(const Features& f, const Diagnosis& d, int64_t now_ns);
  // Logs, counts and (mode act) sends a decision of the policy's.
  void act(const Features& f, const Arm& current, const Decision& d,
           std::chrono::steady_clock::time_point t0, int64_t now_ns);

  ControllerConfig config_;
  std::unique_ptr<Policy> policy_;
  std::unique_ptr<ControlChannel> channel_;
  window::SeriesStore* metrics_ = nullptr;
  JsonLinesLog log_;
  std::unique_ptr<FeatureExtractor> extractor_;
  Features empty_;
  std::optional<Pending> pending_;
  uint64_t last_epoch_sent_ = 0;
  std::optional<Arm> last_advice_;
  ControllerStats stats_;
  Diagnoser diagnoser_;
  Diagnosis reported_;  // the diagnosis last exported and logged
  uint64_t steps_seen_ = 0;
  JsonLinesLog features_log_;
  int64_t features_logged_ns_ = -1;  // the last features-log line (monotonic)
  // A features-log line when features_log_every has passed since the last one.
  void logFeatures(const Features& f, const Arm& current, const char* look, int64_t now_ns);
};

}  // namespace bpftrain::collector::controller
