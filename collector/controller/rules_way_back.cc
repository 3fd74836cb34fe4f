// The rules policy's way back: the all-clear judged on the cause of the last climb (its link
// class, RDMA, or the ring probe from hierarchical), the re-probe's clock and its rise trigger,
// and the A/B trials that keep a step down (or a slowdown's step up) only when it runs no slower.
#include <algorithm>
#include <cstdint>

#include "collector/controller/figures.h"
#include "collector/controller/rules_policy.h"

namespace bpftrain::collector::controller {

RulesPolicy::WayBack RulesPolicy::wayBack(const Features& f, Signal signal, const std::string& why,
                                          int level, int64_t now_ns) {
  // The all-clear for stepping down. With link classes: the link that caused the step up, clear
  // (and the job not severe anywhere). Without: the job's totals below the low thresholds for
  // ring; for the top rung, anything short of severe.
  WayBack back;
  back.by_link = byLink(f);
  bool may_descend = false;
  // RDMA's loss on the higher rung is a verdict on the same link (hierarchical's leaders and
  // halving-doubling cross it; their own pattern did not raise it: clear hierarchical 0-0.027
  // per packet), so while it read congested within rdma_clear_hold there is nothing to re-probe.
  if (level > 0 && back.by_link) {
    bool seen = false;
    const Signal s = classifyLink(f, trigger_link_, back.why, &seen);
    may_descend = seen && signal != Signal::kSevere && s == Signal::kClear;
    if (trigger_link_ == kRdmaLink && seen && s >= Signal::kCongested) rdma_congested_ns_ = now_ns;
    back.still_congested = trigger_link_ == kRdmaLink && rdma_congested_ns_ >= 0 &&
                           now_ns - rdma_congested_ns_ < config_.rdma_clear_hold.count();
    // Likewise a TCP link whose delivery rate reads throttled against this rung's own level:
    // a verdict from up here, so no re-probe while it lasts (on netlab's uplink phase
    // hierarchical read 0.43-0.71x its clear level: rarely this far). Its RTT is no such
    // verdict: the same-host class on hierarchical is a few control messages whose RTT read
    // 6-18 ms throttled or not.
    if (trigger_link_ != kRdmaLink && seen) {
      const double ratio =
          viewOf(f.links[size_t(trigger_link_)], Link(trigger_link_)).delivery_ratio;
      if (ratio > 0 && ratio <= config_.delivery_drop_fraction) link_throttled_ns_ = now_ns;
    }
    back.still_congested =
        back.still_congested || (trigger_link_ != kRdmaLink && link_throttled_ns_ >= 0 &&
                                 now_ns - link_throttled_ns_ < config_.clear_hold.count());
    // The ring probe answers for the ring's links from up here, over what their few control
    // messages show: clear readings step back with no re-probe, congested ones rule it out.
    std::string probe_why;
    // Hierarchical to the ring only, and only for the same-host links: on netlab the probe read
    // 2.5-4x its clear level with lo throttled and 0.8-4.8x with one uplink at 2 Gbit/s, within
    // the clear readings' spread (its 1.5 MiB a hop crosses an uplink in a few ms either way).
    const RingProbeJudge::Verdict v = level == 1 && trigger_link_ == int(Link::kSameHost)
                                          ? ring_probe_.update(f, now_ns, probe_why)
                                          : RingProbeJudge::Verdict::kNone;
    if (v == RingProbeJudge::Verdict::kClear) {
      may_descend = signal != Signal::kSevere;
      back.why = probe_why;
    } else if (v == RingProbeJudge::Verdict::kCongested) {
      may_descend = false;
      back.still_congested = true;
    }
  } else if (level > 0 && !hidden_trigger_) {
    // (After a kept slowdown probe no signal shows its cause: only the re-probe comes back.)
    may_descend = level == 2 ? signal != Signal::kSevere : signal == Signal::kClear;
    back.why = why;
  }
  if (!may_descend) {
    clear_since_ns_ = -1;
  } else if (clear_since_ns_ < 0) {
    clear_since_ns_ = now_ns;
  }
  // RDMA's all-clear is visible on every rung, so a lower rung that keeps losing the throughput
  // A/B would be stepped down to after every hold: its hold grows with the re-probe backoff
  // (x2 per failed descent, up to x4).
  const int64_t rdma_hold =
      config_.rdma_clear_hold.count() *
      std::max<int64_t>(1, reprobe_ns_ / std::max<int64_t>(1, config_.reprobe_after.count()));
  // A clear ring probe held for its rounds in a row (ring_probe_judge.h), not a time.
  back.hold_ns = !back.by_link                ? cooldown_ns_
                 : trigger_link_ == kRdmaLink ? rdma_hold
                 : ring_probe_.clearInARow() >= config_.ring_probe.clear_readings
                     ? 0
                     : config_.clear_hold.count();

  return back;
}

std::optional<RulesPolicy::TrialResult> RulesPolicy::measureTrial(
    std::optional<DescentTrial>& trial, const Features& f, const Arm& current, int64_t now_ns) {
  if (!trial) return std::nullopt;
  DescentTrial& t = *trial;
  const int64_t since = now_ns - t.decided_ns;
  const int64_t settle = config_.probe_settle.count(), measure = config_.probe_measure.count();
  if (current.topology != t.to) {
    if (since > 2 * (settle + measure)) trial.reset();  // never applied, or moved on
    return std::nullopt;
  }
  if (since >= settle && f.samples_per_s > 0) {
    t.sum += f.samples_per_s;
    ++t.n;
  }
  if (since < settle + measure || t.n == 0) return std::nullopt;
  const TrialResult result{t.sum / t.n, t.before};
  trial.reset();
  return result;
}

void RulesPolicy::startDescentTrial(Topology from, Topology to, int64_t now_ns) {
  descent_trial_ = DescentTrial{to, now_ns, samples_ewma_};
  descent_trial_from_ = from;
}

bool RulesPolicy::settlingAfterDescent(int64_t now_ns) const {
  return last_descent_ns_ >= 0 && last_descent_ns_ == last_switch_ns_ &&
         now_ns - last_descent_ns_ < config_.descent_settle.count();
}

bool RulesPolicy::risen(const Features& f, int level, bool by_link, int64_t now_ns,
                        std::string& why) {
  // After an inter-host climb, or a kept slowdown probe (the uplink's throttle, when the ring's
  // links did not show it: netlab's five-phase run climbed on the slowdown 4.2 s into the uplink
  // phase once, 2026-12-05).
  const bool uplink_like = (by_link && trigger_link_ == int(Link::kOtherHost)) || hidden_trigger_;
  if (level == 0 || !uplink_like || !f.config_consistent)
    return rise_.update(0, now_ns);  // (no reading: no rise in a row)
  if (!rise_.update(f.samples_per_s_window, now_ns)) return false;
  if (rise_failed_ && f.samples_per_s_window < config_.reprobe_rise_beyond_false * rise_reading_)
    return false;
  why = "its " + rise_.why("since the climb");
  if (rise_failed_) why += figures(", beyond the false rise's %.0f", rise_reading_, 0);
  return true;
}

int64_t RulesPolicy::reprobeWaitNs(std::string& why) const {
  const double cost_s = double(failed_probe_cost_ns_ >= 0 ? failed_probe_cost_ns_
                                                          : config_.reprobe_cost_guess.count()) *
                        1e-9;
  const int64_t max_ns = config_.max_reprobe_after.count();
  int64_t wait_ns = reprobe_ns_;
  if (left_calm_samples_ > 0 && samples_ewma_ > 0) {
    const double advantage = left_calm_samples_ / samples_ewma_ - 1;
    const double payback_s = advantage > 0 ? config_.reprobe_payback * cost_s / advantage : 1e9;
    wait_ns = std::clamp(std::max(wait_ns, int64_t(payback_s * 1e9)), reprobe_ns_,
                         std::max(reprobe_ns_, max_ns));
    why = figures("every %.0fs: it ran %+.0f%% calm, ", double(wait_ns) * 1e-9, advantage * 100) +
          figures("a failed probe costs %.1fs", cost_s, 0);
  } else {
    why = figures("every %.0fs", double(wait_ns) * 1e-9, 0);
  }
  return wait_ns;
}

}  // namespace bpftrain::collector::controller
