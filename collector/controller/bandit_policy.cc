#include "collector/controller/bandit_policy.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

namespace bpftrain::collector::controller {

BanditPolicy::BanditPolicy(BanditConfig config) : config_(std::move(config)) {
  if (config_.arms.empty()) {
    for (Topology t : {Topology::kRing, Topology::kHierarchical, Topology::kHalvingDoubling})
      config_.arms.push_back(Arm{t, PinMode::kNone});
  }
  stats_.resize(config_.arms.size());
  tokens_ = config_.bank_steps;
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

size_t BanditPolicy::bestArm() const {
  size_t best = stats_.size();
  for (size_t i = 0; i < stats_.size(); ++i) {
    if (stats_[i].n <= 0) continue;
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
}

void BanditPolicy::resetStint() {
  stint_steps_ = 0;
  stint_obs_ = 0;
  stint_mean_ = 0;
  ph_up_ = ph_down_ = 0;
}

// Two-sided Page-Hinkley on the reward relative to the stint's mean so far: alarms when the
// cumulative deviation beyond the drift allowance exceeds lambda, either way.
bool BanditPolicy::pageHinkley(double reward) {
  bool alarm = false;
  ph_alarm_ = false;
  if (stint_obs_ > 0 && stint_mean_ > 0) {
    double dev = reward / stint_mean_ - 1;
    ph_up_ = std::max(0.0, ph_up_ + dev - config_.ph_delta);
    ph_down_ = std::max(0.0, ph_down_ - dev - config_.ph_delta);
    alarm = stint_obs_ >= config_.ph_min_samples &&
            (ph_up_ > config_.ph_lambda || ph_down_ > config_.ph_lambda);
  }
  ph_alarm_ = alarm;
  ++stint_obs_;
  stint_mean_ += (reward - stint_mean_) / stint_obs_;
  return alarm;
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
  if (dt > 0 && f.step_p50_s > 0)
    per_step_ = std::max(1, int(std::ceil(f.step_p50_s * 1e9 / double(dt))));
  const int settle_steps = config_.settle_steps * per_step_;
  const int trial_steps = config_.trial_steps * per_step_;

  const int cur = armIndex(current);
  if (cur != stint_arm_) {
    // The trainer runs something new (our decision, or someone else's): a new stint.
    stint_arm_ = cur;
    resetStint();
  }
  ++stint_steps_;
  if (exploring_) ++exploration_steps_;
  if (cur < 0) {
    // Not one of our arms: move to the greedy best, or the first arm, without charging budget.
    size_t best = bestArm();
    d.change = true;
    d.to = config_.arms[best < stats_.size() ? best : 0];
    d.reason = "exploit";
    d.detail = "current configuration is not an arm of the bandit";
    exploring_ = false;
    return d;
  }

  bool changed = false;
  if (stint_steps_ > settle_steps && f.samples_per_s > 0) {
    double reward = f.samples_per_s;
    if (pageHinkley(reward) && steps_ <= config_.warmup_steps) {
      // Start-up (first steps, caches, buffers) is not a phase change: restart the test.
      resetStint();
      stint_steps_ = settle_steps + 1;
      pageHinkley(reward);
    } else if (stint_obs_ > 1 && ph_alarm_) {
      // The phase changed: what we know about the other arms is from the old phase.
      ++changes_detected_;
      changed = true;
      reexploring_ = true;
      for (ArmStats& s : stats_) s = ArmStats{};
      resetStint();
      stint_steps_ = settle_steps + 1;
      pageHinkley(reward);
      exploring_ = false;
    }
    observe(size_t(cur), reward);
  }
  // Every stint is measured for trial_steps before anything moves (the minimum dwell).
  if (stint_obs_ < trial_steps && !changed) return d;
  exploring_ = false;

  size_t best = bestArm();
  double total_n = 0, scale = 0;
  for (size_t i = 0; i < stats_.size(); ++i) {
    total_n += stats_[i].n;
    scale = std::max(scale, meanReward(i));
  }
  size_t candidate = 0;
  double candidate_index = -std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < stats_.size(); ++i) {
    double idx = index(i, total_n, scale);
    if (idx > candidate_index) {
      candidate_index = idx;
      candidate = i;
    }
  }
  const double cost = settle_steps + trial_steps;
  char buf[256];
  // Untried arms and re-exploration after a change may spend the whole bank; routine re-visits
  // of known arms only a full one.
  // After a change: whatever the bank holds. Untried arms otherwise: keep the reserve.
  const bool untried = std::isinf(candidate_index);
  if (!untried) reexploring_ = false;
  const double needed = reexploring_ && untried ? std::min(cost, config_.bank_steps)
                        : untried ? std::min(cost + config_.reserve_steps, config_.bank_steps)
                                  : config_.bank_steps - 1e-9;
  if (candidate != best && size_t(cur) != candidate &&
      candidate_index > index(best, total_n, scale) && tokens_ >= needed) {
    tokens_ -= cost;
    exploring_ = true;
    d.change = true;
    d.to = config_.arms[candidate];
    d.reason = changed ? "change_detected" : "explore";
    if (std::isinf(candidate_index))
      std::snprintf(buf, sizeof buf, "untried arm; best %s at %.1f samples/s; tokens %.2f",
                    armName(config_.arms[best]).c_str(), meanReward(best), tokens_);
    else
      std::snprintf(buf, sizeof buf, "ucb %.1f > best %s at %.1f samples/s; tokens %.2f",
                    candidate_index, armName(config_.arms[best]).c_str(), meanReward(best),
                    tokens_);
    d.detail = buf;
    return d;
  }
  if (best < stats_.size() && best != size_t(cur) &&
      meanReward(best) > meanReward(size_t(cur)) * (1 + config_.switch_margin)) {
    d.change = true;
    d.to = config_.arms[best];
    d.reason = "exploit";
    std::snprintf(buf, sizeof buf, "%s at %.1f samples/s beats %s at %.1f",
                  armName(config_.arms[best]).c_str(), meanReward(best), armName(current).c_str(),
                  meanReward(size_t(cur)));
    d.detail = buf;
  }
  return d;
}

}  // namespace bpftrain::collector::controller
