// The bandit's phase changes (bandit_policy.h): what is seen as one on the incumbent
// (Page-Hinkley on its reward; on a flat topology, a link class past the rules' thresholds, per
// window step and between steps), which links were congested at it, and what a change resets and
// remembers (the phases that come back).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <vector>

#include "collector/controller/bandit_policy.h"
#include "collector/controller/rules_policy.h"

namespace bpftrain::collector::controller {

// Two-sided Page-Hinkley on the reward relative to the stint's mean so far: alarms when the
// cumulative deviation beyond the drift allowance exceeds lambda, either way.
bool BanditPolicy::pageHinkley(double reward) {
  bool alarm = false;
  if (stint_obs_ > 0 && stint_mean_ > 0) {
    double dev = reward / stint_mean_ - 1;
    ph_up_ = std::max(0.0, ph_up_ + dev - config_.ph_delta);
    ph_down_ = std::max(0.0, ph_down_ - dev - config_.ph_delta);
    alarm = stint_obs_ >= config_.ph_min_samples &&
            (ph_up_ > config_.ph_lambda || ph_down_ > config_.ph_lambda);
  }
  ++stint_obs_;
  stint_mean_ += (reward - stint_mean_) / stint_obs_;
  return alarm;
}

// How far a link class is past the rules' congestion thresholds (1: at them): its RTT median
// against the class's threshold, and for the inter-host links their delivery rate's drop below
// the running topology's own level (kDeliveryDropFraction / ratio), since BBR keeps a throttled
// uplink's RTT low: on netlab's uplink phase the ring's inter-host RTT median stayed at
// 1.6-2.6 ms while the delivery rate read 0.04-0.05x its level (rules_config.h), and the bandit,
// reading the RTT only, met the onset by Page-Hinkley 1.5-1.79 s in (f30a) where the rules took
// 0.99 s. The flat topologies (the ring, halving-doubling, bcube) carry every link class's
// traffic in large chunks, so these show a congested link directly (diagnosis.h); hierarchical
// loads links with its own pattern (its same-host sockets carry small control messages at
// 6-18 ms), so the link tests below read them on flat arms only, and the class tests at a change
// on the classes that topology's traffic crosses. Halving-doubling on netlab (f33a, 4 ranks on 2
// hosts, features every 100 ms): clear, its same-host RTT median 0.8-2.1 ms and its inter-host
// delivery rate 0.44-1.0x its level; 0.25-0.37 s after lo was throttled, same-host 57-103 ms;
// 0.25-0.37 s after host1's uplink was, delivery 0.06x, as the ring's. Read on the ring only,
// those onsets waited for Page-Hinkley on halving-doubling: 1.07-1.56 s.
static double linkExcess(const LinkSignals& ls, Link l) {
  static const RulesConfig kRules;
  if (!ls.seen) return 0;
  const double rtt_high =
      l == Link::kSameHost ? kRules.same_host_rtt_p50_high_s : kRules.other_host_rtt_p50_high_s;
  const double delivery = l == Link::kOtherHost && ls.delivery_ratio > 0
                              ? kRules.delivery_drop_fraction / ls.delivery_ratio
                              : 0;
  return std::max(ls.rtt_p50_s / rtt_high, delivery);
}

// A change only once the stint's links were seen clear: a ring re-visited while the congestion
// lasts is no news. The first window steps of a stint still hold the previous topology's
// samples (1 s window).
bool BanditPolicy::linkChange(const Features& f, size_t cur) {
  if (config_.link_change_steps <= 0 || !flat(cur) || !f.has_links || stint_steps_ < 3)
    return false;
  if (worstLink(f) < 0) {
    link_steps_ = 0;
    link_clear_ = true;
    return false;
  }
  if (++link_steps_ < config_.link_change_steps || !link_clear_) return false;
  if (!(f.samples_per_s > 0 && f.samples_per_s <= config_.link_change_fraction * stint_mean_))
    return false;
  link_clear_ = false;
  return true;
}

int BanditPolicy::worstLink(const Features& f) {
  int worst = -1;
  double worst_excess = 1;
  for (int l = 0; l < kLinkCount; ++l) {
    const double excess = linkExcess(f.links[l], Link(l));
    if (excess < worst_excess) continue;
    worst_excess = excess;
    worst = l;
  }
  return worst;
}

// linkChange()'s fast form between steps: on a flat arm, a link class far past its threshold
// (the rules' decisive_signal_factor) with the latest reading (the step in flight counted) at or
// below the rules' congestion_throughput_fraction of `level`. Counts nothing per step.
bool BanditPolicy::linkFarPast(const Features& f, size_t cur, double level) const {
  static const RulesConfig kRules;
  if (config_.link_change_steps <= 0 || !flat(cur) || !f.has_links || stint_steps_ < 3 ||
      level <= 0)
    return false;
  if (!(f.samples_per_s > 0 && f.samples_per_s <= kRules.congestion_throughput_fraction * level))
    return false;
  for (int l = 0; l < kLinkCount; ++l)
    if (linkExcess(f.links[l], Link(l)) >= kRules.decisive_signal_factor) return true;
  return false;
}

Decision BanditPolicy::react(const Features& f, const Arm& current, int64_t) {
  Decision d;
  d.to = current;
  const int cur = armIndex(current);
  // On a flat arm without a trial: a change (the stint's links were seen clear). On a flat
  // arm's trial (a re-probe of the ring, usually), settling or not: the trial lost, against its
  // reference (the window holds only the arm's samples after 3 window steps, linkFarPast()).
  const bool on_trial = trial_ && int(trial_->arm) == cur;
  const bool far =
      f.live() && cur >= 0 && cur == stint_arm_ && (!trial_ || on_trial) &&
      (on_trial ? linkFarPast(f, size_t(cur), trial_->reference)
                : link_clear_ && stint_obs_ > 0 && linkFarPast(f, size_t(cur), stint_mean_));
  if (!far) {
    react_looks_ = 0;
    return d;
  }
  if (++react_looks_ < config_.react_looks) return d;
  react_looks_ = 0;
  char why[200];
  if (on_trial) {
    std::snprintf(why, sizeof why,
                  "%s: link far past its threshold, latest samples/s %.0f against %s at "
                  "%.1f: abandoned (between steps)",
                  armName(current).c_str(), f.samples_per_s,
                  armName(config_.arms[trial_->from]).c_str(), trial_->reference);
    return backFromTrial(d, why);
  }
  link_changed_ = true;
  changed_link_ = worstLink(f);
  std::snprintf(why, sizeof why,
                "%s link far past its threshold, latest samples/s %.0f against %.0f (between "
                "steps)",
                linkName(Link(changed_link_)).data(), f.samples_per_s, stint_mean_);
  const int settle_steps = config_.settle_steps * per_step_;
  noteChange(f, size_t(cur), settle_steps);
  return explore(size_t(cur), current, true, why, settle_steps, config_.trial_steps * per_step_);
}

// Ring and halving-doubling move same-host gradients over TCP (lo), hierarchical through
// shared memory: a flat topology's same-host RTT over the rules' threshold names the arm to try
// first (on netlab the throttled ring's same-host median was 9.6-24 ms, 1-3.5 ms clear).
bool BanditPolicy::sameHostCongested(const Features& f, size_t cur) const {
  return config_.arms[cur].topology != Topology::kHierarchical && f.has_links &&
         stint_steps_ >= 3 && linkExcess(f.links[int(Link::kSameHost)], Link::kSameHost) >= 1;
}

// The inter-host links past the rules' thresholds: the RTT median, or the delivery rate at its
// drop fraction of the running topology's level (BBR keeps an uplink's RTT low).
bool BanditPolicy::otherHostCongested(const Features& f) {
  return f.has_links && linkExcess(f.links[int(Link::kOtherHost)], Link::kOtherHost) >= 1;
}

void BanditPolicy::rememberPhase(size_t cur, double reward) {
  const double level = meanReward(cur);
  if (config_.recall_tolerance <= 0 || level <= 0 || reward <= 0 ||
      reward >= (1 - config_.recall_tolerance) * level)
    return;  // not a drop: the phase before was no better for this arm
  // One entry per arm and level: the same phase seen again replaces its older estimates.
  std::erase_if(phases_, [&](const Phase& p) {
    return p.arm == cur && std::abs(p.level / level - 1) <= config_.recall_tolerance;
  });
  if (phases_.size() == kPhaseMemory) phases_.erase(phases_.begin());
  phases_.push_back(Phase{cur, level, stats_});
}

bool BanditPolicy::recallPhase(size_t arm, double level) {
  for (auto it = phases_.rbegin(); it != phases_.rend(); ++it) {
    if (it->arm != arm || std::abs(level / it->level - 1) > config_.recall_tolerance) continue;
    stats_ = it->stats;
    for (ArmStats& s : stats_)
      if (s.n > 0) s.last_step = steps_;  // current again, not stale
    phases_.erase(std::next(it).base());
    ++phases_recalled_;
    return true;
  }
  return false;
}

void BanditPolicy::noteChange(const Features& f, size_t cur, int settle_steps, bool rose) {
  // The phase changed: what we know about the other arms is from the old phase; this arm's
  // level is the latest reading.
  rememberPhase(cur, f.samples_per_s);
  ++changes_detected_;
  reexploring_ = true;
  // A drop on the arm a change drove us to, or its recovery from one (a rise back to within the
  // rise factor of its level before the drop), is not the end of what drove us from the origin:
  // its way back, and the flat arms held back with it, stand. f32b bandit r0: a drop of
  // hierarchical 16 s into the intra-host phase (366 samples/s against 418) made hierarchical
  // the origin; the re-exploration tried the ring and halving-doubling on the congested links,
  // and with no probe-judged way back clear-again ran hierarchical for 16 s, until its
  // throughput rose.
  const bool on_way = origin_arm_ >= 0 && origin_arm_ != int(cur);
  const bool recovery =
      rose && dip_level_ > 0 && f.samples_per_s <= dip_level_ * std::max(1.0, config_.rise.factor);
  if (on_way && (!rose || recovery)) {
    if (!rose) dip_level_ = meanReward(cur);
    same_host_congested_ = same_host_congested_ || sameHostCongested(f, cur);
  } else {
    dip_level_ = 0;
    // A rise is a congestion lifting: the same-host links may still read congested in the
    // window (f31b bandit r0: the lift of lo seen on halving-doubling held the ring back as a
    // flat arm on congested links, and clear-again ran hierarchical at 0.8x the ring).
    same_host_congested_ = !rose && sameHostCongested(f, cur);
    probe_way_back_ = !rose && config_.arms[cur].topology != Topology::kHierarchical &&
                      (same_host_congested_ || !otherHostCongested(f));
    // The way back is re-probed after a drop only. After a rise (an uplink lifting under
    // hierarchical) the arm it leaves is the higher rung: f29a's two bandit runs re-probed
    // hierarchical 8 s into clear-last, where it ran 0.75x the ring, once each.
    origin_arm_ = rose ? -1 : int(cur);
    reprobe_ = config_.reprobe_steps;
  }
  const double level = f.samples_per_s > 0 ? f.samples_per_s : stint_mean_;
  for (ArmStats& s : stats_) s = ArmStats{};
  if (level > 0) observe(cur, level);
  restartStint(level, settle_steps, f.now_ns);
}

}  // namespace bpftrain::collector::controller
