#include "collector/controller/controller_service.h"

#include <algorithm>
#include <cstring>

#include "common/clock.h"
#include "common/hmac.h"

namespace bpftrain::collector::controller {

std::unique_ptr<ControllerService> ControllerService::create(ControllerConfig config,
                                                             window::SeriesStore* metrics,
                                                             std::string& error) {
  std::unique_ptr<Policy> policy = makePolicy(config.policy);
  if (!policy) {
    error = "controller: unknown policy '" + config.policy + "': use --policy rules or bandit";
    return nullptr;
  }
  return create(std::move(config), std::move(policy), metrics, error);
}

std::unique_ptr<ControllerService> ControllerService::create(ControllerConfig config,
                                                             std::unique_ptr<Policy> policy,
                                                             window::SeriesStore* metrics,
                                                             std::string& error) {
  std::unique_ptr<ControllerService> s(new ControllerService());
  if (config.mode == ControlMode::kAct) {
    std::string secret = config.secret;
    if (secret.empty()) {
      if (config.secret_file.empty()) {
        error =
            "controller: --control needs --secret FILE (the secret the trainer was given), "
            "or --control=advise to only recommend";
        return nullptr;
      }
      std::optional<std::string> read = readSecretFile(config.secret_file, error);
      if (!read) return nullptr;
      secret = *read;
    }
    std::string job = config.job.empty() ? "default" : config.job;
    s->channel_ = ControlChannel::open(config.trainer_address, std::move(secret), job, error);
    if (!s->channel_) return nullptr;
  }
  // Both logs are JSON lines appended to a file the user named; none when the path is empty.
  if (!s->log_.open(config.decisions_log, "decisions log", error) ||
      !s->features_log_.open(config.features_log, "features log", error)) {
    error = "controller: " + error;
    return nullptr;
  }
  if (!config.job.empty()) s->extractor_ = std::make_unique<FeatureExtractor>(config.job);
  s->policy_ = std::move(policy);
  s->metrics_ = metrics;
  s->config_ = std::move(config);
  return s;
}

ControllerService::~ControllerService() = default;

void ControllerService::count(const metrics::MetricDef& metric,
                              std::initializer_list<window::Label> labels, double value,
                              int64_t now_ns) {
  if (metrics_ != nullptr)
    window::recordMetric(*metrics_, config_.writer, metric, labels, value, now_ns);
}

void ControllerService::send(const Pending& p, int64_t now_ns) {
  std::string error;
  if (channel_->send(p.epoch, uint8_t(p.to.topology), uint8_t(p.to.pinning), realtimeNowNs(),
                     error)) {
    ++stats_.sends;
    count(metrics::kControllerSends, {{"result", "ok"}}, 1, now_ns);
  } else {
    ++stats_.send_errors;
    count(metrics::kControllerSends, {{"result", "error"}}, 1, now_ns);
    std::fprintf(stderr, "%s (retrying next step)\n", error.c_str());
  }
}

// Exports the current diagnosis as bpftrain_diagnosis_info = 1 (refreshed every step so that it
// stays in the window) and the one it replaces as 0; a change is one line in the decisions log
// and on stderr.
void ControllerService::diagnose(const Features& f, int64_t now_ns) {
  report(f, diagnoser_.update(f), now_ns);
}

void ControllerService::report(const Features& f, const Diagnosis& d, int64_t now_ns) {
  const std::string rank = std::to_string(d.rank);
  if (!d.sameAs(reported_)) {
    const std::string old_rank = std::to_string(reported_.rank);
    if (reported_.cause != "none" || !reported_.detail.empty() || steps_seen_ > 0)
      count(metrics::kDiagnosisInfo,
            {{"job", f.job},
             {"cause", reported_.cause},
             {"rank", old_rank},
             {"link", reported_.link}},
            0, now_ns);
    std::fprintf(stderr, "controller: diagnosis %.*s%s%s: %s\n", int(d.cause.size()),
                 d.cause.data(), d.link.empty() ? "" : " ", d.link.c_str(),
                 d.detail.empty() ? "no cause found" : d.detail.c_str());
    log_.write({{"event", "diagnosis"},
                {"job", f.job},
                {"cause", d.cause},
                {"rank", d.rank},
                {"link", d.link},
                {"carried", d.carried},
                {"detail", d.detail},
                {"topology", f.topology ? std::string(topologyName(*f.topology)) : ""},
                {"wall_ns", realtimeNowNs()}});
    reported_ = d;
  }
  count(metrics::kDiagnosisInfo,
        {{"job", f.job}, {"cause", d.cause}, {"rank", rank}, {"link", d.link}}, 1, now_ns);
}

void ControllerService::onStep(const window::SeriesStore& store, int64_t now_ns) {
  auto t0 = std::chrono::steady_clock::now();
  std::vector<window::SeriesSnapshot> snaps = config_.window.count() > 0
                                                  ? store.snapshotWindow(now_ns, config_.window)
                                                  : store.snapshot(now_ns);
  if (!extractor_) {
    std::vector<std::string> jobs = jobsIn(snaps);
    if (jobs.empty()) return;
    extractor_ = std::make_unique<FeatureExtractor>(jobs.front());
  }
  const Features& f = extractor_->update(snaps, now_ns);
  if (!f.has_steps) return;
  diagnose(f, now_ns);
  Arm current{f.topology.value_or(Topology::kRing), f.pinning.value_or(PinMode::kNone)};
  ++steps_seen_;
  logFeatures(f, current, "step", now_ns);

  if (pending_) {
    if (f.epoch_min >= 0 && uint64_t(f.epoch_min) >= pending_->epoch && f.config_consistent) {
      double latency_s = double(now_ns - pending_->decided_ns) * 1e-9;
      ++stats_.applied;
      count(metrics::kControllerApplySeconds, {}, latency_s, now_ns);
      log_.write({{"event", "applied"},
                  {"job", f.job},
                  {"epoch", pending_->epoch},
                  {"to", armName(pending_->to)},
                  {"apply_latency_s", latency_s},
                  {"retries", pending_->retries},
                  {"wall_ns", realtimeNowNs()}});
      pending_.reset();
    } else if (f.checkpoint_active) {
      return;  // the trainer applies nothing mid-checkpoint; resend afterwards
    } else if (++pending_->retries > config_.max_retries) {
      ++stats_.abandoned;
      count(metrics::kControllerAbandoned, {}, 1, now_ns);
      std::fprintf(stderr,
                   "controller: trainer did not apply epoch %llu after %d sends; is it running "
                   "with --adaptive and the same --secret? deciding afresh\n",
                   (unsigned long long)pending_->epoch, config_.max_retries);
      log_.write({{"event", "abandoned"},
                  {"job", f.job},
                  {"epoch", pending_->epoch},
                  {"to", armName(pending_->to)},
                  {"trainer_epoch", f.epoch_min},
                  {"wall_ns", realtimeNowNs()}});
      pending_.reset();
    } else {
      send(*pending_, now_ns);
      return;
    }
  }

  if (f.checkpoint_active) {
    ++stats_.deferred_checkpoint;
    count(metrics::kControllerDeferred, {{"reason", "checkpoint"}}, 1, now_ns);
    return;
  }
  if (!f.config_consistent) return;  // ranks still disagree: a switch is in flight

  act(f, current, policy_->decide(f, current, now_ns), t0, now_ns);
}

void ControllerService::onTick(const window::SeriesStore& store, int64_t now_ns) {
  // Only with a job already followed, nothing in flight and nothing that defers decisions.
  if (!extractor_ || pending_) return;
  auto t0 = std::chrono::steady_clock::now();
  std::vector<window::SeriesSnapshot> snaps = store.snapshotWindow(
      now_ns, config_.window.count() > 0 ? std::min(config_.window, config_.react_window)
                                         : config_.react_window);
  const Features f = extractFeatures(snaps, extractor_->last().job, now_ns, &extractor_->last());
  if (!f.live() || f.checkpoint_active || !f.config_consistent) return;
  Arm current{f.topology.value_or(Topology::kRing), f.pinning.value_or(PinMode::kNone)};
  logFeatures(f, current, "react", now_ns);
  const Decision d = policy_->react(f, current, now_ns);
  act(f, current, d, t0, now_ns);
}

void ControllerService::logFeatures(const Features& f, const Arm& current, const char* look,
                                    int64_t now_ns) {
  // What the policy saw: thresholds are calibrated from these.
  if (!features_log_.isOpen() ||
      (features_logged_ns_ >= 0 &&
       now_ns - features_logged_ns_ < config_.features_log_every.count()))
    return;
  features_logged_ns_ = now_ns;
  features_log_.write({{"job", f.job},
                       {"arm", armName(current)},
                       {"look", look},
                       {"features", featuresJson(f)},
                       {"wall_ns", realtimeNowNs()}});
}

void ControllerService::act(const Features& f, const Arm& current, const Decision& d,
                            std::chrono::steady_clock::time_point t0, int64_t now_ns) {
  if (!d.change) return;
  if (config_.mode == ControlMode::kAdvise) {
    // The trainer does not follow advice, so the policy may repeat itself: log changes only.
    if (last_advice_ && *last_advice_ == d.to) return;
    last_advice_ = d.to;
  }
  // A move on a link's congestion names that link now, before the decision's own log line.
  if (diagnoser_.decided(f, d.link)) report(f, diagnoser_.last(), now_ns);
  double decide_us =
      std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
  uint64_t epoch =
      std::max<uint64_t>(f.epoch_max < 0 ? 0 : uint64_t(f.epoch_max), last_epoch_sent_) + 1;
  ++stats_.decisions;
  std::string from = armName(current), to = armName(d.to);
  count(metrics::kControllerDecisions, {{"from", from}, {"to", to}, {"reason", d.reason}}, 1,
        now_ns);
  std::fprintf(stderr, "controller: %s %s -> %s (%.*s: %s)\n",
               config_.mode == ControlMode::kAdvise ? "advises" : "switches", from.c_str(),
               to.c_str(), int(d.reason.size()), d.reason.data(), d.detail.c_str());
  log_.write({{"event", "decision"},
              {"mode", controlModeName(config_.mode)},
              {"policy", policy_->name()},
              {"job", f.job},
              {"epoch", config_.mode == ControlMode::kAdvise ? 0 : epoch},
              {"from", from},
              {"to", to},
              {"reason", d.reason},
              {"detail", d.detail},
              {"diagnosis",
               {{"cause", reported_.cause}, {"link", reported_.link}, {"rank", reported_.rank}}},
              {"decide_latency_us", decide_us},
              {"features", featuresJson(f)},
              {"wall_ns", realtimeNowNs()}});
  if (config_.mode == ControlMode::kAdvise) return;
  last_epoch_sent_ = epoch;
  pending_ = Pending{epoch, current, d.to, now_ns, 0};
  send(*pending_, now_ns);
}

}  // namespace bpftrain::collector::controller
