#include "collector/controller/bandit_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iterator>
#include <limits>
#include <vector>

namespace bpftrain::collector::controller {

BanditPolicy::BanditPolicy(BanditConfig config) : config_(std::move(config)) {
  if (config_.arms.empty()) {
    for (Topology t : {Topology::kRing, Topology::kHierarchical, Topology::kHalvingDoubling})
      config_.arms.push_back(Arm{t, PinMode::kNone});
  }
  stats_.resize(config_.arms.size());
  tokens_ = config_.bank_steps;
  ring_probe_ = RingProbeJudge(config_.ring_probe);
  rise_ = ThroughputRise(config_.rise);
}

int BanditPolicy::armIndex(const Arm& a) const {
  for (size_t i = 0; i < config_.arms.size(); ++i)
    if (config_.arms[i] == a) return int(i);
  return -1;
}

double BanditPolicy::meanReward(size_t arm) const {
  const ArmStats& s = stats_[arm];
  return s.n > 0 ? s.sum / s.n : 0;
}

// The greedy best among the arms whose estimate is current: the one running, and those played
// within stale_steps (an older mean is from another phase and is re-measured, not exploited).
size_t BanditPolicy::bestArm() const {
  size_t best = stats_.size();
  for (size_t i = 0; i < stats_.size(); ++i) {
    if (stats_[i].n <= 0) continue;
    if (int(i) != stint_arm_ && steps_ - stats_[i].last_step > config_.stale_steps) continue;
    if (best == stats_.size() || meanReward(i) > meanReward(best)) best = i;
  }
  return best;  // stats_.size() when nothing was observed yet
}

double BanditPolicy::index(size_t arm, double total_n, double scale) const {
  const ArmStats& s = stats_[arm];
  if (s.n <= 0) return std::numeric_limits<double>::infinity();
  return meanReward(arm) +
         config_.exploration * scale * std::sqrt(std::log(std::max(total_n, M_E)) / s.n);
}

void BanditPolicy::observe(size_t arm, double reward) {
  for (ArmStats& s : stats_) {
    s.sum *= config_.discount;
    s.n *= config_.discount;
  }
  stats_[arm].sum += reward;
  stats_[arm].n += 1;
  stats_[arm].last_step = steps_;
}

void BanditPolicy::restartStint(double level, int settle_steps, int64_t now_ns) {
  resetStint();
  rise_.restart(now_ns);
  stint_steps_ = settle_steps + 1;
  if (level > 0) pageHinkley(level);
}

void BanditPolicy::resetStint() {
  stint_steps_ = 0;
  stint_obs_ = 0;
  resumed_obs_ = 0;
  stint_mean_ = 0;
  ph_up_ = ph_down_ = 0;
  recent_ = RecentReadings{};
  link_steps_ = 0;
  link_clear_ = false;
}

double BanditPolicy::incumbentLevel(size_t cur) const {
  return stats_[cur].n > 0 ? meanReward(cur) : stint_mean_;
}

double BanditPolicy::RecentReadings::median() const {
  // Insertion sort of at most kSize values (std::sort over a part of a std::array trips GCC
  // 12's -Warray-bounds on its 16-element threshold).
  const int k = held();
  std::array<double, kSize> sorted{};
  for (int i = 0; i < k; ++i) {
    int j = i;
    for (; j > 0 && sorted[size_t(j - 1)] > value[size_t(i)]; --j)
      sorted[size_t(j)] = sorted[size_t(j - 1)];
    sorted[size_t(j)] = value[size_t(i)];
  }
  return k % 2 ? sorted[size_t(k / 2)] : (sorted[size_t(k / 2 - 1)] + sorted[size_t(k / 2)]) / 2;
}

bool BanditPolicy::stalled(double reading) const {
  return recent_.held() >= kStallBaseline && reading <= config_.abandon_fraction * recent_.median();
}

Decision BanditPolicy::move(size_t to, size_t cur, std::string_view reason, std::string detail,
                            bool paid, bool reprobe) {
  Decision d;
  last_move_step_ = steps_;
  d.change = true;
  d.to = config_.arms[to];
  d.reason = reason;
  d.detail = std::move(detail);
  trial_ = Trial{to, cur, incumbentLevel(cur), paid, reprobe};
  trial_->from_state = ChangeState{stint_mean_, stint_obs_, ph_up_, ph_down_, link_clear_, recent_};
  return d;
}

Decision BanditPolicy::backFromTrial(Decision d, const char* why) {
  const size_t back = trial_->from;
  resume_.emplace(back, trial_->from_state);
  endTrial(false);
  last_move_step_ = steps_;
  d.change = true;
  d.to = config_.arms[back];
  d.reason = "probe_slower";
  d.detail = why;
  return d;
}

void BanditPolicy::endTrial(bool kept) {
  if (!trial_) return;
  if (trial_->reprobe) {
    if (kept) {
      origin_arm_ = -1;  // the way back was found
      dip_level_ = 0;
      same_host_congested_ = false;  // and the same-host links with it: flat arms are fair again
    } else {
      reprobe_ = std::min(2 * reprobe_, config_.max_reprobe_steps);
      left_origin_step_ = steps_;
      // A clear verdict the links did not bear out: not a same-host congestion the probe is
      // calibrated for (an uplink's throttle reads clear at times); the timer re-probes.
      if (trial_->by_probe && !same_host_congested_) probe_way_back_ = false;
    }
  } else if (kept && origin_arm_ >= 0 && size_t(origin_arm_) == trial_->from) {
    left_origin_step_ = steps_;
  }
  if (kept) {
    // A trial that wins was no loss: its arm was the better one from the move on.
    tokens_ = std::min(config_.bank_steps, tokens_ + trial_->charged);
    exploration_steps_ -= trial_->charged;
  } else {
    ++trials_abandoned_;
    // The trial's readings are the arm's level now: a discounted mean of tens of older readings
    // would win the next exploit against the incumbent again (the four-phase after-run
    // alternated ring and hierarchical every 3-8 s in clear-again on a 260 mean that its trials
    // read as 190). The arm is re-visited by UCB or a change as any other.
    if (trial_->n > 0) stats_[trial_->arm] = ArmStats{trial_->sum, double(trial_->n), steps_};
  }
  trial_.reset();
}

Decision BanditPolicy::decide(const Features& f, const Arm& current, int64_t now_ns) {
  Decision d;
  d.to = current;
  if (!f.has_steps) return d;
  ++steps_;
  tokens_ = std::min(config_.bank_steps, tokens_ + config_.budget_fraction);
  // When a training step is longer than a window step, settling and trials are counted in
  // training steps: a reading is only new once a step under the new configuration finished.
  const int64_t dt = last_now_ns_ > 0 && now_ns > last_now_ns_ ? now_ns - last_now_ns_ : 0;
  last_now_ns_ = now_ns;
  if (dt > 0) step_ns_ = dt;
  if (dt > 0 && f.step_p50_s > 0)
    per_step_ = std::max(1, int(std::ceil(f.step_p50_s * 1e9 / double(dt))));
  const int settle_steps = config_.settle_steps * per_step_;
  const int trial_steps = config_.trial_steps * per_step_;

  const int cur = armIndex(current);
  if (cur != stint_arm_) {
    // The trainer runs something new (our decision, or someone else's): a new stint. An arm
    // last played long ago is measured afresh.
    stint_arm_ = cur;
    resetStint();
    if (resume_ && int(resume_->first) == cur) {
      // Settling and the link window start afresh (they follow the switch), the rest goes on.
      const ChangeState& s = resume_->second;
      stint_mean_ = s.mean;
      stint_obs_ = resumed_obs_ = s.obs;
      ph_up_ = s.ph_up;
      ph_down_ = s.ph_down;
      link_clear_ = s.link_clear;
      recent_ = s.recent;
    }
    resume_.reset();
    rise_.restart(now_ns);
    if (cur >= 0 && stats_[cur].last_step >= 0 &&
        steps_ - stats_[cur].last_step > config_.stale_steps)
      stats_[cur] = ArmStats{};
  }
  ++stint_steps_;
  // A trial that is not what runs was never applied (or someone else moved the job).
  if (trial_ && int(trial_->arm) != cur) trial_.reset();
  // Exploration is paid per window step spent on it: time, whatever the arm's step length.
  if (trial_ && trial_->paid) {
    ++exploration_steps_;
    ++trial_->charged;
    tokens_ -= 1;
  }
  if (cur < 0) {
    // Not one of our arms: move to the greedy best, or the first arm, without charging budget.
    size_t best = bestArm();
    d.change = true;
    d.to = config_.arms[best < stats_.size() ? best : 0];
    d.reason = "exploit";
    d.detail = "current configuration is not an arm of the bandit";
    return d;
  }

  bool changed = false, changed_up = false;
  std::string change_why;  // what showed the change (short: no allocation)
  if (stint_steps_ > settle_steps && f.samples_per_s > 0) {
    const double reward = f.samples_per_s;
    // Back from a lost trial, the incumbent's readings over the minimum dwell before the next
    // trial are no part of its level, that trial's reference (the level before the lost one
    // is): the ring's first readings after another topology run low (f32c bandit r0: 581 and
    // 513 samples/s after hierarchical's start-up trial, around 620 before it;
    // halving-doubling's trial then read 1.05x the ring's 578 and was kept for the clear
    // phase). Page-Hinkley still reads them, against the level before the trial: a change
    // during the trial is seen.
    const bool returning = resumed_obs_ > 0 && ownReadings() < 2 * trial_steps;
    // A stall is no part of the incumbent's level (a trial's readings are judged as they come).
    const bool stall = !trial_ && stalled(reward);
    if (!returning) {
      if (!stall) observe(size_t(cur), reward);
      recent_.push(reward);
    }
    if (trial_) {
      // A trial's readings are judged against the incumbent, never as a phase change.
      trial_->sum += reward;
      ++trial_->n;
      ++stint_obs_;
      stint_mean_ += (reward - stint_mean_) / stint_obs_;
    } else {
      const bool drift = pageHinkley(reward);
      // Not after a same-host change: hierarchical keeps same-host traffic in shared memory, so
      // its throughput does not follow those links (f29c bandit r0: a 1.15x bump 11 s into the
      // intra-host phase read as a lift, wiped the way back, and the phase after ran on
      // hierarchical); the ring probe judges them instead.
      const bool rose = config_.rise.factor > 0 && !same_host_congested_ &&
                        config_.arms[size_t(cur)].topology != Topology::kRing &&
                        rise_.update(f.samples_per_s_window, now_ns);
      if (steps_ == config_.warmup_steps + 1 && changes_detected_ == 0) {
        // The end of start-up: the incumbent's level and Page-Hinkley's reference from here on
        // (its links seen clear and its latest readings still count), the latest reading unless
        // it stalled. Start-up trials are judged against it.
        const double level = stall ? recent_.median() : reward;
        stats_[size_t(cur)] = ArmStats{};
        observe(size_t(cur), level);
        const bool link_clear = link_clear_;
        const RecentReadings recent = recent_;
        restartStint(level, settle_steps, now_ns);
        link_clear_ = link_clear;
        recent_ = recent;
      } else if ((drift || rose) && steps_ <= config_.warmup_steps) {
        // Start-up (first steps, caches, buffers) is not a phase change: restart the test.
        restartStint(reward, settle_steps, now_ns);
      } else if (drift || rose) {
        changed = true;
        change_why = drift ? "throughput" : "throughput rise";
        changed_up = rose || ph_up_ > config_.ph_lambda;
      }
    }
  }
  // Start-up tries no arm while the job's level still rises (warmup_steps), unless a change
  // came in it or the ring starts on congested links (nothing to wait for: a throttled ring
  // runs at a third of hierarchical).
  const bool start_look_congested = steps_ <= config_.warmup_steps && changes_detected_ == 0 &&
                                    config_.arms[size_t(cur)].topology == Topology::kRing &&
                                    f.has_links && stint_steps_ >= 3 && worstLink(f) >= 0;
  warming_up_ = steps_ <= config_.warmup_steps && changes_detected_ == 0 && !start_look_congested;
  link_changed_ = false;
  // A ring that starts on congested links (never seen clear, congested on link_change_steps
  // looks in a row) is a link change from the start: hierarchical first, the flat arms held back
  // while the same-host links read congested, the ring's way back judged by the ring probe.
  // Before, start-up explored every arm in turn once the ring's own readings made a reference
  // (12 of them in 1.3 s steps): on netlab with lo at 500 Mbit/s from the start it tried
  // hierarchical 10-11.6 s in, then halving-doubling on the throttled links.
  start_congested_looks_ = start_look_congested && !link_clear_ ? start_congested_looks_ + 1 : 0;
  const bool starts_congested = start_congested_looks_ >= std::max(1, config_.link_change_steps);
  if (!trial_ && !changed && (starts_congested || linkChange(f, size_t(cur)))) {
    changed = link_changed_ = true;
    changed_link_ = worstLink(f);
    change_why = std::string(linkName(Link(changed_link_))) +
                 (starts_congested ? " link congested from the start" : " link");
  }
  if (changed) noteChange(f, size_t(cur), settle_steps, changed_up);
  ring_probe_verdict_ = RingProbeJudge::Verdict::kNone;
  // (Not after an inter-host change: the probe does not show an uplink's throttle,
  // RingProbeJudge.) From any flat origin: halving-doubling sends its same-host chunks over the
  // ring's TCP links, so the ring's links read clear are its way back too (before, the way back
  // from halving-doubling was the re-probe timer, 8 s and more).
  if (origin_arm_ >= 0 && origin_arm_ != cur && probe_way_back_ &&
      config_.arms[size_t(cur)].topology != Topology::kRing)
    ring_probe_verdict_ = ring_probe_.update(f, now_ns, ring_probe_why_);
  else
    ring_probe_.reset(f);

  char buf[256];
  // The trial's verdict: abandoned at the first reading far below the incumbent, else kept or
  // left after trial_steps readings.
  if (trial_) {
    if (trial_->n == 0) return d;  // settling
    const double mean = trial_->sum / trial_->n;
    const bool slow = mean <= config_.abandon_fraction * trial_->reference;
    if (!slow && trial_->n < trial_steps) return d;
    // Back at the level it held before a change dropped it: that phase is back, and with it
    // what was known of every arm (not a new phase to explore arm by arm).
    if (const size_t arm = trial_->arm; !slow && recallPhase(arm, mean)) {
      endTrial(true);
      if (origin_arm_ == int(arm)) {
        origin_arm_ = -1;  // the way back was found
        dip_level_ = 0;
        same_host_congested_ = false;
      }
      reexploring_ = false;
      return d;
    }
    // A re-probe of the ring on the ring probe's clear verdict, or the ring tried first after a
    // lift, is judged as the rules judge their step down: by the links, kept unless slow or its
    // own links read congested. The ring's first readings after hierarchical run low: in f31c's
    // clear-again such re-probes read 398-407 samples/s against hierarchical's 416-461 over 2-3
    // readings, lost, and the ring came 8-17 s after the lift (its steady level 500-580); in an
    // uplink e2e run the ring tried on hierarchical's rise read 547 against its 568 and was not
    // tried again (7% of the clear phase on the ring).
    if (!slow && (trial_->by_probe || trial_->after_lift) &&
        config_.arms[trial_->arm].topology == Topology::kRing && f.has_links && worstLink(f) < 0) {
      endTrial(true);
      return d;
    }
    // Hierarchical tried on a flat arm's congested links is judged as the rules judge their step
    // up: kept unless slow. Its reference is the reading that corroborated the change, whose
    // step began before the congestion did: f39 bandit r0 (five-phase) met host1's uplink
    // throttle on the ring at 440 samples/s (the throttled ring ran 300-380), hierarchical's
    // trial read 432 against it and lost, and the ring and halving-doubling ran 7.5 s of the
    // phase before hierarchical's mean won it back. A false link change costs a stint on
    // hierarchical until the ring probe or the re-probe timer finds the ring again.
    if (!slow && trial_->upper_bound &&
        config_.arms[trial_->arm].topology == Topology::kHierarchical) {
      endTrial(true);
      return d;
    }
    const bool better =
        mean >= trial_->reference * (trial_->upper_bound ? 1 : 1 + config_.switch_margin);
    if (better && mean < trial_->reference * (1 + config_.confirm_margin) &&
        trial_->n < 2 * trial_steps)
      return d;  // better, but not by enough to tell from noise yet
    if (!slow && better) {
      endTrial(true);  // the trial arm is the incumbent now
      return d;
    }
    std::snprintf(buf, sizeof buf, "%s at %.1f samples/s over %d readings against %s at %.1f%s",
                  armName(current).c_str(), mean, trial_->n,
                  armName(config_.arms[trial_->from]).c_str(), trial_->reference,
                  slow ? ": abandoned" : "");
    return backFromTrial(d, buf);
  }
  // Exploit against the incumbent's level now, the trials' reference: a trial that lost to a
  // level the incumbent no longer holds (a change seen on the links before throughput) is won
  // on the next look. By confirm_margin, so that a trial lost by a little and the incumbent's
  // noise do not alternate; before the minimum dwell only when the incumbent is as decisively
  // slower as an abandoned trial.
  // Not while the re-exploration after a change has untried arms left: they go first, each on
  // the price of its first verdict. f31b bandit r0 exploited the ring's one throttled reading
  // (240 samples/s) against halving-doubling's 142-172 three times in the intra-host phase, each
  // trial abandoned between steps, and never tried hierarchical (490), untried since the change.
  size_t best = bestArm();
  const double level = incumbentLevel(size_t(cur));
  const int dwell = ownReadings();
  if (dwell > 0 && best < stats_.size() && best != size_t(cur) &&
      !(reexploring_ && untriedLeft(size_t(cur))) &&
      meanReward(best) > level * (1 + config_.confirm_margin) &&
      (dwell >= trial_steps || level <= config_.abandon_fraction * meanReward(best))) {
    std::snprintf(buf, sizeof buf, "%s at %.1f samples/s beats %s at %.1f",
                  armName(config_.arms[best]).c_str(), meanReward(best), armName(current).c_str(),
                  level);
    return move(best, size_t(cur), "exploit", buf, false, false);
  }
  // Every stint is measured for trial_steps before anything moves (the minimum dwell), and
  // twice that before a trial is judged against it, unless a change makes haste worth it.
  if (dwell < trial_steps && !changed) return d;
  return explore(size_t(cur), current, changed, change_why.c_str(), settle_steps, trial_steps);
}

bool BanditPolicy::heldBack(size_t arm) const {
  // The origin is re-tried by its way back only (the ring probe's verdict, or the timer), even
  // when a later drop (noteChange()) has left it untried; the flat arms also while the ring
  // probe reads the links they share congested.
  if (int(arm) == origin_arm_) return true;
  return (same_host_congested_ || ring_probe_verdict_ == RingProbeJudge::Verdict::kCongested) &&
         config_.arms[arm].topology != Topology::kHierarchical;
}

bool BanditPolicy::untriedLeft(size_t cur) const {
  for (size_t i = 0; i < stats_.size(); ++i)
    if (i != cur && stats_[i].n <= 0 && !heldBack(i)) return true;
  return false;
}

Decision BanditPolicy::explore(size_t cur_arm, const Arm& current, bool changed,
                               const char* change_why, int settle_steps, int trial_steps) {
  Decision d;
  d.to = current;
  char buf[256];
  const int cur = int(cur_arm);
  const size_t best = bestArm();
  const double level = incumbentLevel(cur_arm);

  double total_n = 0, scale = 0;
  for (size_t i = 0; i < stats_.size(); ++i) {
    total_n += stats_[i].n;
    scale = std::max(scale, meanReward(i));
  }
  size_t candidate = 0;
  double candidate_index = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < stats_.size(); ++i) {
    double idx = index(i, total_n, scale);
    // After a change on the same-host links the other flat topologies would send their
    // same-host chunks over the same congested TCP links: left untried until a re-probe of the
    // arm the change drove us from finds them clear (on netlab's intra-host phase
    // halving-doubling's trial ran 129 samples/s against hierarchical's 540, for 1.5 s).
    if (std::isinf(idx) && heldBack(i)) continue;
    // Among untried arms after a change, hierarchical first when the same-host links were
    // congested, or the inter-host links showed the change: it sends the least across hosts
    // (leaders only; on netlab's uplink phase 368 samples/s against the ring's 301). f33a
    // bandit r1 on halving-doubling tried the ring first there (290 against its 362).
    const bool links_congested =
        same_host_congested_ || (link_changed_ && changed_link_ == int(Link::kOtherHost));
    const bool preferred = reexploring_ && links_congested && std::isinf(idx) &&
                           std::isinf(candidate_index) &&
                           config_.arms[i].topology == Topology::kHierarchical &&
                           config_.arms[candidate].topology != Topology::kHierarchical;
    if (idx > candidate_index || preferred) {
      candidate_index = idx;
      candidate = i;
    }
  }
  const double cost = settle_steps + trial_steps;
  // Untried arms after a change may spend whatever the bank holds; untried arms otherwise keep
  // the reserve; routine re-visits of known arms wait for a full bank and revisit_steps.
  const bool untried = std::isinf(candidate_index);
  if (!untried) reexploring_ = false;
  const bool reference_ready = reexploring_ || ownReadings() >= 2 * trial_steps;
  // After a change a trial may start on what its first verdict costs (settling and one
  // reading): a slow arm ends there, and in a slow phase's long steps (1.4-2 s throttled) a
  // whole trial's price would leave the next arm untried.
  const double first_verdict = settle_steps + per_step_;
  const double needed = reexploring_ && untried ? std::min(first_verdict, config_.bank_steps)
                        : untried ? std::min(cost + config_.reserve_steps, config_.bank_steps)
                        : steps_ - last_move_step_ >= config_.revisit_steps
                            ? config_.bank_steps - 1e-9
                            : std::numeric_limits<double>::infinity();
  if (!warming_up_ && reference_ready && candidate != best && size_t(cur) != candidate &&
      candidate_index > index(best, total_n, scale) && tokens_ >= needed) {
    if (untried)
      std::snprintf(buf, sizeof buf, "untried arm; %s at %.1f samples/s; tokens %.2f",
                    armName(current).c_str(), level, tokens_);
    else
      std::snprintf(buf, sizeof buf, "ucb %.1f > best %s at %.1f samples/s; tokens %.2f",
                    candidate_index, armName(config_.arms[best]).c_str(), meanReward(best),
                    tokens_);
    std::string detail = changed ? std::string(change_why) + " change; " + buf : buf;
    d = move(candidate, size_t(cur), changed ? "change_detected" : "explore", detail, true, false);
    trial_->upper_bound = changed && link_changed_;
    // A change leaves no origin only when it was a lift (noteChange()).
    trial_->after_lift = changed && origin_arm_ < 0;
    if (changed && link_changed_) d.link = changed_link_;
    return d;
  }
  // The way back: the arm a change drove us from, re-probed with a backoff, or at once when the
  // ring probe reads its links clear; never while it reads them congested.
  const bool probe_clear = ring_probe_verdict_ == RingProbeJudge::Verdict::kClear;
  if (origin_arm_ >= 0 && origin_arm_ != cur && !reexploring_ && reference_ready &&
      ring_probe_verdict_ != RingProbeJudge::Verdict::kCongested &&
      (probe_clear || steps_ - left_origin_step_ >= reprobe_) &&
      tokens_ >= std::min(cost, config_.bank_steps)) {
    std::snprintf(buf, sizeof buf, "re-probe %s after %.1fs on %s at %.1f samples/s; tokens %.2f",
                  armName(config_.arms[origin_arm_]).c_str(),
                  double(steps_ - left_origin_step_) * double(step_ns_) * 1e-9,
                  armName(current).c_str(), level, tokens_);
    Decision back = move(size_t(origin_arm_), size_t(cur), "explore",
                         probe_clear ? std::string(buf) + "; " + ring_probe_why_ : std::string(buf),
                         true, true);
    trial_->by_probe = probe_clear;
    return back;
  }
  return d;
}

}  // namespace bpftrain::collector::controller
