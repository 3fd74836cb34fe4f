#include "collector/controller/rules_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "collector/controller/figures.h"

namespace bpftrain::collector::controller {
namespace {

// The calm level's smoothing per window step (~5 s at 500 ms steps): one reading's weight once
// the level has its first ones.
constexpr double kCalmAlpha = 1.0 / RulesPolicy::kCalmFirstReadings;

// The escalation ladder. Bcube sends the same bytes across hosts as halving-doubling, so it
// sits on the same rung.
int levelOf(Topology t) {
  switch (t) {
    case Topology::kRing:
      return 0;
    case Topology::kHierarchical:
      return 1;
    case Topology::kHalvingDoubling:
    case Topology::kBcube:
      return 2;
  }
  return 0;
}

Topology topologyAt(int level) {
  static constexpr Topology kLadder[] = {Topology::kRing, Topology::kHierarchical,
                                         Topology::kHalvingDoubling};
  return kLadder[std::clamp(level, 0, 2)];
}

}  // namespace

bool RulesPolicy::escalateOk(int64_t now_ns) const {
  const int64_t since_switch = last_switch_ns_ < 0 ? INT64_MAX : now_ns - last_switch_ns_;
  // A failed probe of the lower rung must end quickly; other moves up wait the full dwell.
  return since_switch >= config_.min_dwell.count() ||
         (last_descent_ns_ >= 0 && last_descent_ns_ == last_switch_ns_ &&
          since_switch >= config_.escalate_dwell.count());
}

int RulesPolicy::wantedLevel(Signal signal, int link) {
  const int wanted = signal == Signal::kSevere ? 2 : signal == Signal::kCongested ? 1 : 0;
  // Same-host congestion, however severe, climbs no higher than hierarchical, the rung that
  // keeps same-host traffic off the network stack: halving-doubling's same-host chunks take
  // the congested loopback too (netlab, lo throttled: 97 samples/s against hierarchical's 557).
  return link == int(Link::kSameHost) ? std::min(wanted, levelOf(Topology::kHierarchical)) : wanted;
}

void RulesPolicy::climb(const Features& f, Decision& d, Signal signal, int wanted, int link,
                        const std::string& why, bool by_link, int64_t now_ns) {
  d.change = true;
  // A climb within a step down's trial ends a failed probe: its time is what the next bet
  // risks. Any other climb leaves a rung whose calm level is what a re-probe may win back (a
  // step down that held 17 s through a clear phase was no 17 s probe).
  const int64_t trial_ns =
      (config_.probe_settle + config_.probe_measure + config_.escalate_dwell).count();
  const bool ends_probe = last_descent_ns_ >= 0 && last_descent_ns_ == last_switch_ns_ &&
                          now_ns - last_descent_ns_ < trial_ns;
  // A failed probe goes back to the rung it left, which held: a severe reading on the lower
  // rung's first throttled step (netlab: same-host jitter 102 ms on the ring) once sent it past
  // that rung.
  d.to.topology = ends_probe ? descent_trial_from_ : topologyAt(wanted);
  d.reason = signal == Signal::kSevere ? "severe_congestion" : "congestion";
  d.detail = why;
  d.link = link;
  // A link that only its delivery rate showed congested (BBR keeps the RTT low: netlab's
  // uplink) is not cleared by its RTT, least of all on hierarchical, whose leaders' RTT sat
  // under the low thresholds through the throttle at times. Back from a failed probe, the
  // congestion is the same one.
  const bool tcp_link = link >= 0 && link != kRdmaLink && f.has_links;
  if (!ends_probe || trigger_link_ != link) {
    trigger_by_delivery_ = false;
    if (tcp_link) {
      const TransportView v = viewOf(f.links[size_t(link)], Link(link));
      trigger_by_delivery_ =
          v.delivery_ratio > 0 && v.delivery_ratio <= config_.delivery_drop_fraction &&
          v.rtt_p50_s < v.rtt_p50_high_s && v.rtt_jitter_s < config_.rtt_jitter_high_s &&
          v.queued_bytes_p99 < config_.queued_bytes_high;
    }
  }
  // Congestion on another link class than the one that caused the last step up is another
  // cause, not the old one back: on netlab's five-phase run the uplink phase came 13 s after a
  // re-probe had found the same-host links clear, and counting it as a failed descent doubled
  // the re-probe wait to 32 s, which the way back after the uplink then waited out.
  const bool same_cause = link == trigger_link_;
  trigger_link_ = link;
  hidden_trigger_ = false;
  if (ends_probe)
    failed_probe_cost_ns_ = now_ns - last_descent_ns_;
  else if (calm_samples_ > 0)
    left_calm_samples_ = calm_samples_;
  // A rise re-probe that climbs back was a false rise; another cause starts afresh.
  rise_failed_ = ends_probe && same_cause && (rise_failed_ || rise_reprobe_);
  rise_reprobe_ = false;
  if (last_descent_ns_ >= 0) {
    if (now_ns - last_descent_ns_ < config_.failed_descent_window.count() &&
        (same_cause || ends_probe)) {
      cooldown_ns_ = std::min(2 * cooldown_ns_, int64_t(config_.max_cooldown.count()));
      reprobe_ns_ = std::min(2 * reprobe_ns_, int64_t(config_.max_reprobe_after.count()));
      d.detail += figures("; the last step down failed after %.1fs: next probe after %.0fs",
                          double(now_ns - last_descent_ns_) * 1e-9,
                          double(by_link || link >= 0 ? reprobe_ns_ : cooldown_ns_) * 1e-9);
    } else {
      cooldown_ns_ = config_.cooldown.count();
      reprobe_ns_ = config_.reprobe_after.count();
    }
  }
}

Decision RulesPolicy::react(const Features& f, const Arm& current, int64_t now_ns) {
  Decision d;
  d.to = current;
  // Only once decide() has a calm reference for this rung and its own clocks are set.
  if (!f.live() || calm_samples_ <= 0 || cooldown_ns_ < 0 || reprobe_ns_ < 0) return d;
  std::string why;
  int link = -1;
  const Signal signal = classify(f, why, &link);
  const int level = levelOf(current.topology);
  const int wanted = wantedLevel(signal, link);
  if (wanted <= level || !escalateOk(now_ns) || !farPast(f, link)) {
    react_looks_ = 0;
    return d;
  }
  const int looks = excess(f, link) >= config_.react_single_look_factor ? 1 : config_.react_looks;
  if (++react_looks_ < looks) return d;
  why +=
      figures(" (%.1fx the threshold; latest samples/s %.0f, ", excess(f, link), f.samples_per_s) +
      figures("%.0f calm: decisive between steps)", calm_samples_, 0);
  const bool by_link = byLink(f);
  climb(f, d, signal, wanted, link, why, by_link, now_ns);
  moved(d, current, false, now_ns);
  return d;
}

Decision RulesPolicy::decide(const Features& f, const Arm& current, int64_t now_ns) {
  Decision d;
  d.to = current;
  if (!f.has_steps) return d;
  // The window mean, not the latest reading: one slow step on a shared machine is not congestion.
  ring_busbw_best_ = std::max(ring_busbw_best_, f.busbw_window);
  if (cooldown_ns_ < 0) cooldown_ns_ = config_.cooldown.count();

  std::string why;
  int link = -1;
  Signal signal = classify(f, why, &link);
  const int level = levelOf(current.topology);
  const int wanted = wantedLevel(signal, link);
  if (on_rung_since_ns_ < 0) on_rung_since_ns_ = now_ns;
  if (reprobe_ns_ < 0) reprobe_ns_ = config_.reprobe_after.count();
  if (level != 1) ring_probe_.reset(f);  // the probe judges the ring from hierarchical only

  countCongestion(f, signal, link, level, wanted, why);
  followCalm(f, level, wanted, now_ns);
  if (slowdown_retry_ns_ < 0) slowdown_retry_ns_ = config_.slowdown_retry_after.count();

  const WayBack back = wayBack(f, signal, why, level, now_ns);

  const int64_t since_switch = last_switch_ns_ < 0 ? INT64_MAX : now_ns - last_switch_ns_;
  const bool dwell_ok = since_switch >= config_.min_dwell.count();
  const bool escalate_ok = escalateOk(now_ns);
  std::string rise_why;
  const bool rose = risen(f, level, back.by_link, now_ns, rise_why);
  // A step down is an A/B trial too: after probe_settle, the lower rung's samples/s over
  // probe_measure must not fall short of the rung it left (smoothed before the move) by more than
  // probe_loss, whatever the transport signals say (a clear link is no proof the lower rung is
  // faster: on a busy host hierarchical can beat the ring with nothing congested).
  std::string slower_why;
  double slower_loss = 0;  // the share of throughput the failed step down gave up
  if (const std::optional<TrialResult> r = measureTrial(descent_trial_, f, current, now_ns);
      r && r->after < (1 - config_.probe_loss) * r->before) {
    slower_why = figures("samples/s %.0f on the lower rung against %.0f before the step down",
                         r->after, r->before);
    slower_loss = 1 - r->after / r->before;
    rise_failed_ = rise_failed_ || rise_reprobe_;
    rise_reprobe_ = false;
  }
  // The slowdown probe's verdict: the higher rung must run faster than the slow one it left.
  std::string ascent_why;
  bool ascent_failed = false;
  if (const std::optional<TrialResult> r = measureTrial(ascent_trial_, f, current, now_ns)) {
    ascent_failed = r->after < (1 + config_.slowdown_gain) * r->before;
    ascent_why = figures("samples/s %.0f on the higher rung against %.0f on the slow one", r->after,
                         r->before);
    if (!ascent_failed) {
      hidden_trigger_ = true;
      trigger_link_ = -1;
      slowdown_retry_ns_ = config_.slowdown_retry_after.count();
    }
  }
  if (ascent_failed) {
    d.change = true;
    d.to.topology = ascent_from_;
    d.reason = "probe_slower";
    d.detail = ascent_why + figures(
                                "; the slow level is this rung's calm now; next slowdown probe "
                                "after %.0fs",
                                double(slowdown_retry_ns_) * 1e-9, 0);
    slowdown_blocked_until_ns_ = now_ns + slowdown_retry_ns_;
    slowdown_retry_ns_ =
        std::min(2 * slowdown_retry_ns_, int64_t(config_.max_slowdown_retry_after.count()));
  } else if (!slower_why.empty()) {
    d.change = true;
    d.to.topology = descent_trial_from_;
    d.reason = "probe_slower";
    d.detail = slower_why;
    if (last_descent_ns_ >= 0)
      failed_probe_cost_ns_ = int64_t(double(now_ns - last_descent_ns_) * slower_loss);
    cooldown_ns_ = std::min(2 * cooldown_ns_, int64_t(config_.max_cooldown.count()));
    reprobe_ns_ = std::min(2 * reprobe_ns_, int64_t(config_.max_reprobe_after.count()));
    d.detail += figures("; next probe after %.0fs (cooldown %.0fs)", double(reprobe_ns_) * 1e-9,
                        double(cooldown_ns_) * 1e-9);
  } else if (escalate_ok && congested_steps_ >= config_.escalate_steps &&
             (!settlingAfterDescent(now_ns) || signal == Signal::kSevere || farPast(f, link))) {
    climb(f, d, signal, wanted, link, why, back.by_link, now_ns);
  } else if (dwell_ok && slow_since_ns_ >= 0 &&
             now_ns - slow_since_ns_ >= config_.slowdown_hold.count() &&
             now_ns >= slowdown_blocked_until_ns_) {
    d.change = true;
    d.to.topology = topologyAt(level + 1);
    d.reason = "slowdown";
    d.detail =
        figures("samples/s %.0f against %.0f calm", f.samples_per_s_window, calm_samples_) +
        figures(", allreduce share %.2f against %.2f calm, for ", f.allreduce_share, calm_share_) +
        figures("%.1fs with no link signal: trying the next rung (kept if %.0f%% faster)",
                double(now_ns - slow_since_ns_) * 1e-9, config_.slowdown_gain * 100);
    // Judged against the slow level itself: the smoothed one still carries the calm steps
    // before the slowdown (netlab's uplink phase: 345 against a slow ring's 290-304 samples/s,
    // which failed a hierarchical that ran 342).
    const double slow_level = slow_n_ > 0 ? slow_sum_ / slow_n_ : samples_ewma_;
    d.detail += figures("; the slow level %.0f samples/s", slow_level, 0);
    ascent_trial_ = DescentTrial{topologyAt(level + 1), now_ns, slow_level};
    ascent_from_ = current.topology;
  } else if (dwell_ok && clear_since_ns_ >= 0 && now_ns - clear_since_ns_ >= back.hold_ns) {
    d.change = true;
    d.to.topology = topologyAt(level - 1);
    d.reason = "clear";
    startDescentTrial(current.topology, topologyAt(level - 1), now_ns);
    d.detail =
        back.why + figures(" for %.1fs (hold %.1fs)", double(now_ns - clear_since_ns_) * 1e-9,
                           double(back.hold_ns) * 1e-9);
    last_descent_ns_ = now_ns;
  } else if (std::string reprobe_why;
             dwell_ok && (back.by_link || hidden_trigger_) && level > 0 &&
             signal != Signal::kSevere && !back.still_congested &&
             (rose || now_ns - on_rung_since_ns_ >= reprobeWaitNs(reprobe_why))) {
    // No verdict on the causing link from up here: try the lower rung; its own signals decide
    // within a second or two whether to climb back.
    d.change = true;
    d.to.topology = topologyAt(level - 1);
    d.reason = "reprobe";
    startDescentTrial(current.topology, topologyAt(level - 1), now_ns);
    d.detail = std::string(trigger_link_ >= 0 ? triggerName(trigger_link_) : "the slowdown") +
               " cannot be judged on this rung; " +
               (rose ? rise_why + ": probing the lower one now"
                     : figures("probing the lower one after %.0fs",
                               double(now_ns - on_rung_since_ns_) * 1e-9, 0) +
                           " (" + reprobe_why + ")");
    last_descent_ns_ = now_ns;
    rise_reprobe_ = rose;
    // The bar a later rise must clear if this one fails: set by the re-probe made, not by every
    // rise seen (a rise held back by the dwell would raise it step by step).
    if (rose) rise_reading_ = f.samples_per_s_window;
    if (!rose) rise_failed_ = false;  // the periodic re-probe is due: rises count again
  }

  pinTrialVerdict(f, current, d, now_ns);
  updateTrialBaselines(f);
  considerPinning(f, current, d, dwell_ok, now_ns);
  moved(d, current, ascent_failed, now_ns);
  return d;
}

void RulesPolicy::countCongestion(const Features& f, Signal signal, int link, int level, int wanted,
                                  std::string& why) {
  // Consecutive steps asking for a higher rung than the current one.
  // A congestion signal must cost throughput to count: RTT also rises with CPU load alone on a
  // shared host (the steady-state e2e test saw other_host medians of 5-8 ms with other builds
  // running, and unchanged samples/s). The reference is this rung's smoothed samples/s over the
  // steps without congestion; right after a move there is none yet and the signal counts alone
  // (a failed probe must climb back quickly).
  signal_steps_ = wanted > level ? signal_steps_ + 1 : 0;
  if (wanted <= level) {
    congested_steps_ = 0;
  } else if ((!f.has_transport && !rdmaReports(f)) || signal == Signal::kSevere) {
    // Bandwidth is throughput already; severe signals (64 MiB queued, 100 ms jitter) are no
    // CPU-load artefact: they count alone.
    ++congested_steps_;
  } else if (calm_samples_ <= 0) {
    // No reference yet (the job's first steps): the signal must hold for no_reference_steps.
    congested_steps_ =
        std::max(0, signal_steps_ - (config_.no_reference_steps - config_.escalate_steps));
  } else if (decisive(f, link)) {
    congested_steps_ = std::max(congested_steps_ + 1, config_.escalate_steps);
    why += figures(" (samples/s %.0f, %.0f calm: decisive)",
                   std::min(f.samples_per_s, f.samples_per_s_window), calm_samples_);
  } else if (f.samples_per_s_window <= config_.congestion_throughput_fraction * calm_samples_) {
    ++congested_steps_;
  } else {
    congested_steps_ = 0;
    why +=
        figures(" (not counted: samples/s %.0f, %.0f calm)", f.samples_per_s_window, calm_samples_);
  }
}

void RulesPolicy::followCalm(const Features& f, int level, int wanted, int64_t now_ns) {
  // A slowdown the links do not show: throughput down and the allreduce's share of the step up
  // against this rung's calm levels, which stop following while it holds. Not before those
  // levels have their first readings since a climb: the first window still holds the rung left
  // (f35a rules r2: 558 samples/s at a share of 0.63 where hierarchical ran 373 at 0.73), and a
  // slowdown read against it stopped them from learning.
  const bool slow = level < 2 && wanted <= level && calmKnown() && calm_share_ >= 0 &&
                    f.samples_per_s_window > 0 &&
                    f.samples_per_s_window <= config_.slowdown_fraction * calm_samples_ &&
                    f.allreduce_share >= calm_share_ + config_.slowdown_share_rise;
  if (!slow) {
    slow_since_ns_ = -1;
    slow_sum_ = 0;
    slow_n_ = 0;
  } else {
    if (slow_since_ns_ < 0) slow_since_ns_ = now_ns;
    if (f.samples_per_s > 0) {
      slow_sum_ += f.samples_per_s;
      ++slow_n_;
    }
  }
  // (Not while a pinning signal holds: its cost is judged against the level before it.)
  if (wanted <= level && f.samples_per_s_window > 0 && !slow && pin_since_ns_ < 0) {
    // An EWMA (~5 s at 500 ms steps) that starts as the mean of its first readings since the
    // move: seeded with the first one alone, it kept a window that still held the rung left for
    // seconds. f34a rules r0 (five-phase, 2026-12-07): the 1 s window right after the uplink's
    // climb still held the ring's steps from before the onset (718 samples/s), hierarchical ran
    // 361-392, and 10 s later its calm level read 486, so cpu+llc migrations (1146/s, as always
    // on hierarchical) read as "costing throughput" and a compact trial cost 4 s at -25%.
    calm_readings_ = calm_samples_ <= 0 ? 1 : calm_readings_ + 1;
    const double weight = std::max(kCalmAlpha, 1.0 / calm_readings_);
    calm_samples_ = calm_samples_ <= 0
                        ? f.samples_per_s_window
                        : calm_samples_ + weight * (f.samples_per_s_window - calm_samples_);
    calm_share_ = calm_share_ < 0 ? f.allreduce_share
                                  : calm_share_ + weight * (f.allreduce_share - calm_share_);
  }
}

// The "before" of a trial: throughput and signals smoothed over the last few steps.
void RulesPolicy::updateTrialBaselines(const Features& f) {
  if (f.config_consistent && f.samples_per_s > 0) {
    constexpr double kAlpha = 0.25;  // ~2 s at 500 ms steps
    if (samples_ewma_ >= 0)
      samples_dev_ewma_ += kAlpha * (std::abs(f.samples_per_s - samples_ewma_) - samples_dev_ewma_);
    samples_ewma_ = samples_ewma_ < 0 ? f.samples_per_s
                                      : samples_ewma_ + kAlpha * (f.samples_per_s - samples_ewma_);
    for (int m = 0; m < kPinModeCount; ++m)
      pin_signal_ewma_[m] += kAlpha * (pinSignal(f, PinMode(m)) - pin_signal_ewma_[m]);
  }
}

void RulesPolicy::moved(Decision& d, const Arm& current, bool ascent_failed, int64_t now_ns) {
  const int level = levelOf(current.topology);
  if (d.change && d.to == current) d.change = false;
  if (d.change) {
    if (d.to.topology != current.topology) {
      on_rung_since_ns_ = now_ns;
      // Another rung, another reference. Stepping down, the lower rung must beat the one it
      // leaves: its congestion counts while it runs no faster than that rung did.
      calm_samples_ = levelOf(d.to.topology) < level && !ascent_failed
                          ? samples_ewma_ / config_.congestion_throughput_fraction
                          : -1;
      // That bar is no reading: it fades as the EWMA does, not as a mean's first term.
      calm_readings_ = calm_samples_ > 0 ? kCalmFirstReadings : 0;
      calm_since_climb_ = calm_samples_ <= 0;
      // Each rung has its own share of time in the allreduce; back from a failed slowdown
      // probe, the slow level is the lower rung's calm one (rebuilt from the next steps).
      calm_share_ = -1;
      link_throttled_ns_ = -1;  // a verdict of the rung left
      slow_since_ns_ = -1;
      slow_sum_ = 0;
      slow_n_ = 0;
      rise_.restart(now_ns);  // the next rung's level since the move
    }
    last_switch_ns_ = now_ns;
    react_looks_ = 0;
    congested_steps_ = 0;
    pin_steps_ = 0;
    pin_since_ns_ = -1;
    clear_since_ns_ = -1;
  }
}

}  // namespace bpftrain::collector::controller
