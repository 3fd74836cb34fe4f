// The controller for NCCL jobs (issue 12 part 4), run by the collector's main loop next to the
// trainer's ControllerService. Once per window step, for every communicator of every NCCL job
// whose ranks all report here (bpftrain_nccl_tuner_calls from as many ranks as their hellos'
// world), it measures the dominant collective's time per call from the profiler's series, asks
// its NcclPolicy (nccl_policy.h) and sends the chosen (algorithm, protocol) to every rank as one
// signed kind-6 frame (wire::encodeSignedNcclControl) to the address its hello came from, out of
// the ingest port (the plugin's socket is connected there).
//
// Every rank must switch at the same getCollInfo call, or NCCL hangs: a decision's start call is
// the highest progress any rank reported plus the calls the fastest rank makes in `lead` (its
// reports are up to a flush interval old, the frame takes a step to leave) and at least
// `min_lead_calls`. The switch counts as applied when every rank reports the decision's epoch
// (bpftrain_nccl_decision_epoch). A rank that reports calls past the start call without the
// epoch missed it (frame lost, or late): the decision is abandoned and, when other ranks did
// switch, the previous arm is decided again for everyone at a new start call (reason recover).
// Same decisions log (JSON lines) and metrics as the trainer's controller.
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "collector/controller/control_mode.h"
#include "collector/controller/json_lines_log.h"
#include "collector/controller/nccl_policy.h"
#include "collector/window/series_store.h"
#include "common/host_port.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::controller {

// One NCCL plugin rank as the sender registry knows it (collector/ingest/sender_registry.h).
struct NcclSender {
  std::string job;
  uint32_t rank = 0;
  uint32_t world = 0;
  SocketAddress address;
};

// Sends one datagram to `to` from the ingest port; false with `error` set when it did not leave.
using NcclSendFn =
    std::function<bool(const SocketAddress& to, std::span<const uint8_t>, std::string& error)>;

struct NcclControllerConfig {
  ControlMode mode = ControlMode::kAct;
  std::string secret_file;  // read with readSecretFile(); ignored when `secret` is set
  std::string secret;
  std::string job;            // empty: every NCCL job
  std::string decisions_log;  // JSON lines, appended; empty: none
  int writer = 0;             // the series store writer index reserved for the controller
  NcclPolicyConfig policy;
  // How far ahead of the reported progress a start call lies, in the fastest rank's calls per
  // second: two flush intervals (200 ms each by default) and two collector steps (500 ms) fit.
  std::chrono::nanoseconds lead = std::chrono::seconds(2);
  uint64_t min_lead_calls = 64;
  // A rank's progress older than this is not a live rank of the communicator.
  std::chrono::nanoseconds fresh = std::chrono::seconds(3);
  int max_wait_steps = 40;  // a decision no rank applied after this many steps is abandoned
  // Host kernel signals under which a step is no reading (BPF probes; 0 when absent): thread
  // migrations per second, summed over the job (the rules policy pins at 200/s; 4 unpinned
  // ranks on 2 CPUs migrate ~60/s here), and TCP retransmits per second.
  double disturbed_migrations_per_s = 200;
  double disturbed_retransmits_per_s = 50;
};

struct NcclControllerStats {
  uint64_t decisions = 0;
  uint64_t sends = 0;
  uint64_t send_errors = 0;
  uint64_t applied = 0;
  uint64_t abandoned = 0;
  uint64_t comms = 0;  // steps a communicator was handed to the policy (all its ranks here)
};

// One collective of one communicator, summed over its ranks since their series were created.
struct NcclTotals {
  double seconds = 0;  // timed collectives' time
  double timed = 0;    // collectives with a time
  double bytes = 0;
  double count = 0;
  std::map<NcclArm, double> by_arm;  // collectives per (algorithm, protocol)
};

class NcclController {
 public:
  // nullptr with `error` naming the fix (no secret in mode act, unwritable log).
  static std::unique_ptr<NcclController> create(NcclControllerConfig config,
                                                window::SeriesStore* metrics, NcclSendFn send,
                                                std::string& error);
  ~NcclController();

  void onStep(const window::SeriesStore& store, std::span<const NcclSender> senders,
              int64_t now_ns);
  const NcclControllerStats& stats() const { return stats_; }

 private:
  struct Pending {
    uint64_t epoch;
    NcclArm from, to;
    uint64_t start_call;
    int64_t decided_ns;
    int waited;
    bool recovery;
  };
  struct CommState {
    std::string job, comm;
    uint64_t comm_id = 0;
    NcclPolicy policy;
    std::map<int, NcclTotals> previous;  // by collective index
    bool has_previous = false;
    double progress_max = -1;
    int64_t progress_ns = 0;
    double calls_per_s = 0;
    NcclArm applied;  // the arm of applied_epoch
    uint64_t applied_epoch = 0;
    std::optional<Pending> pending;
    std::optional<NcclArm> last_advice;
    bool waiting_logged = false;
  };

  NcclController() = default;
  void count(const metrics::MetricDef& metric, std::initializer_list<window::Label> labels,
             double value, int64_t now_ns);
  bool sendDecision(CommState& c, const std::vector<const NcclSender*>& to, uint64_t epoch,
                    uint64_t start_call, int collective, const NcclArm& arm, int64_t now_ns);

  NcclControllerConfig config_;
  NcclSendFn send_;
  window::SeriesStore* metrics_ = nullptr;
  JsonLinesLog log_;
  std::map<std::pair<std::string, std::string>, CommState> comms_;  // by (job, comm label)
  uint64_t last_epoch_sent_ = 0;
  uint64_t sender_id_ = 0;
  uint32_t sequence_ = 0;
  NcclControllerStats stats_;
};

}  // namespace bpftrain::collector::controller
