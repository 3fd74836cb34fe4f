// The rules policy's pinning: one move away from none on migration or cross-node signals that
// hold (and, for cpu+llc migrations, cost throughput), judged as an A/B trial inside the run and
// undone when it does not pay.
#include <cstdio>

#include "collector/controller/figures.h"
#include "collector/controller/rules_policy.h"

namespace bpftrain::collector::controller {

double RulesPolicy::pinSignal(const Features& f, PinMode mode) {
  // Cross-node events per second: a task moved to another node, or a NUMA hinting fault on memory
  // of another node. Either may have caused a move to numa, and a trial that judged node moves
  // alone could not see the benefit of one caused by misplaced memory (no node moves at all).
  if (mode == PinMode::kNuma)
    return f.migrations_per_s[int(MigrationScope::kNode)] + f.numa_remote_faults_per_s;
  return f.migrations_per_s[int(MigrationScope::kCpu)] +
         f.migrations_per_s[int(MigrationScope::kLlc)];
}

bool RulesPolicy::pinTrialUndo(const Features& f, const Arm& current, int64_t now_ns,
                               std::string& why) {
  if (!pin_trial_) return false;
  PinTrial& t = *pin_trial_;
  if (current.pinning != t.mode) {
    // Not applied yet (the trainer switches at a step boundary), or moved by someone else.
    if (now_ns - t.decided_ns > 2 * (config_.pin_settle + config_.pin_measure).count())
      pin_trial_.reset();
    return false;
  }
  if (current.topology != t.topology) {
    pin_trial_.reset();  // no verdict: before and after ran different topologies
    return false;
  }
  if (t.applied_ns < 0) t.applied_ns = now_ns;
  const int64_t since = now_ns - t.applied_ns;
  if (since < config_.pin_settle.count()) return false;
  t.sum_samples += f.samples_per_s;
  t.sum_signal += pinSignal(f, t.mode);
  ++t.n;
  const double after = t.sum_samples / t.n, after_signal = t.sum_signal / t.n;
  const double gain = t.before_samples_per_s > 0 ? after / t.before_samples_per_s - 1 : 0;
  const double early_bar =
      std::max(config_.pin_early_loss, config_.pin_early_noise_factor * t.before_noise);
  t.early_hits =
      t.before_samples_per_s > 0 && f.samples_per_s <= (1 - early_bar) * t.before_samples_per_s
          ? t.early_hits + 1
          : 0;
  const bool early = since >= (config_.pin_settle + config_.pin_early_measure).count() &&
                     t.early_hits >= config_.pin_early_readings && gain <= -early_bar;
  if (!early && since < (config_.pin_settle + config_.pin_measure).count()) return false;
  const bool harm = gain < -config_.pin_loss;
  const bool better = gain >= config_.pin_gain;
  const bool calmer =
      t.before_signal > 0 && after_signal <= (1 - config_.pin_signal_drop) * t.before_signal;
  char buf[200];
  std::snprintf(buf, sizeof buf,
                "pinning %s: samples/s %.0f -> %.0f (%+.1f%%), its signal %.1f/s -> %.1f/s%s",
                std::string(pinModeName(t.mode)).c_str(), t.before_samples_per_s, after, gain * 100,
                t.before_signal, after_signal, early ? " (early)" : "");
  why = buf;
  pin_trial_.reset();
  return early || harm || !(better || calmer);
}

void RulesPolicy::pinTrialVerdict(const Features& f, const Arm& current, Decision& d,
                                  int64_t now_ns) {
  // The pinning trial's verdict; an undone move is not retried for pin_retry_after.
  std::string trial_why;
  if (!d.change && pinTrialUndo(f, current, now_ns, trial_why)) {
    d.change = true;
    d.to.pinning = PinMode::kNone;
    d.reason = "pin_undone";
    d.detail = trial_why + figures("; undone, not retried for %.0fs",
                                   double(config_.pin_retry_after.count()) * 1e-9, 0);
    pin_blocked_until_ns_ = now_ns + config_.pin_retry_after.count();
  }
}

void RulesPolicy::considerPinning(const Features& f, const Arm& current, Decision& d, bool dwell_ok,
                                  int64_t now_ns) {
  // Pinning moves once, away from none; it rides along with a topology change or stands alone.
  if (current.pinning == PinMode::kNone && dwell_ok && !d.change &&
      now_ns >= pin_blocked_until_ns_) {
    const double node_moves = f.migrations_per_s[int(MigrationScope::kNode)];
    const double cpu_moves = pinSignal(f, PinMode::kCompact);
    std::string pin_why;
    PinMode want = PinMode::kNone;
    // Enter at the thresholds; once the signal holds, stay until it falls under the release
    // fraction of them.
    const double k = pin_since_ns_ >= 0 ? config_.pin_release_fraction : 1.0;
    if (node_moves >= k * config_.node_migrations_per_s ||
        (f.numa_remote_faults_per_s > 0 &&
         f.remote_fault_share >= k * config_.remote_fault_share)) {
      want = PinMode::kNuma;
      pin_why = figures("node migrations %.1f/s, remote fault share %.2f", node_moves,
                        f.remote_fault_share);
    } else if (cpu_moves >= k * config_.cpu_migrations_per_s && calmKnown() &&
               f.samples_per_s_window <= (pin_since_ns_ >= 0 ? config_.pin_cost_release_fraction
                                                             : config_.pin_cost_fraction) *
                                             calm_samples_) {
      want = PinMode::kCompact;
      pin_why = figures("cpu+llc migrations %.1f/s >= %.1f/s", cpu_moves,
                        k * config_.cpu_migrations_per_s) +
                figures(" costing throughput (samples/s %.0f, %.0f calm)", f.samples_per_s_window,
                        calm_samples_);
    }
    pin_steps_ = want != PinMode::kNone ? pin_steps_ + 1 : 0;
    if (want == PinMode::kNone) {
      pin_since_ns_ = -1;
    } else if (pin_since_ns_ < 0) {
      pin_since_ns_ = now_ns;
    }
    if (want != PinMode::kNone && pin_steps_ >= config_.escalate_steps &&
        now_ns - pin_since_ns_ >= config_.pin_sustain.count()) {
      pin_why += figures(" for %.1fs (sustain %.1fs)", double(now_ns - pin_since_ns_) * 1e-9,
                         double(config_.pin_sustain.count()) * 1e-9);
      if (!d.change) {
        d.reason = want == PinMode::kNuma ? "cross_node" : "migrations";
        d.detail = pin_why;
      } else {
        d.detail += "; " + pin_why;
      }
      d.change = true;
      d.to.pinning = want;
      pin_trial_ = PinTrial{want,
                            d.to.topology,
                            now_ns,
                            samples_ewma_,
                            pin_signal_ewma_[int(want)],
                            samples_ewma_ > 0 ? samples_dev_ewma_ / samples_ewma_ : 0};
    }
  }
}

}  // namespace bpftrain::collector::controller
