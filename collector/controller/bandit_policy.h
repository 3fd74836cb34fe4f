// A non-stationary bandit over (topology, pinning) arms, rewarded by the job's measured
// samples/s. Discounted UCB (Garivier & Moulines 2011): every observation first discounts all
// arms' statistics by `discount`, so old evidence fades and long-unplayed arms regain an
// exploration bonus. Exploration (any step spent on an arm other than the greedy best,
// including its settling steps) is paid from a token bucket that fills by `budget_fraction`
// per step and holds at most `bank_steps`: over any run, exploration steps <= budget_fraction x
// steps + bank_steps (the initial allowance that learns the arms at start-up). A two-sided
// Page-Hinkley test on the current arm's reward detects a phase change and forgets the other
// arms' stale estimates so that they are re-explored.
#pragma once

#include <vector>

#include "collector/controller/policy.h"

namespace bpftrain::collector::controller {

struct BanditConfig {
  // Empty: ring, hierarchical and halving-doubling with pinning none (bcube moves the same bytes
  // across hosts as halving-doubling; add it, or pinning arms, explicitly).
  std::vector<Arm> arms;
  double discount = 0.99;
  double exploration = 0.2;  // UCB bonus scale, relative to the best arm's mean reward
  double budget_fraction = 0.05;
  // Tokens held at most, and at start. Routine re-visits of known arms wait for a full bank, so
  // that a phase change (or an untried arm) always finds bank - cost tokens to re-explore with.
  double bank_steps = 18;
  // Trying untried arms at start-up leaves this many tokens in the bank, so that the first phase
  // change can be explored at once.
  double reserve_steps = 6;
  // Both in training steps (a training step longer than a window step stretches them).
  int settle_steps = 1;         // readings ignored after a switch (the step still mixes configs)
  int trial_steps = 2;          // readings per exploration visit, and the minimum stint
  double switch_margin = 0.03;  // exploit a different arm only when it is this much better
  // Page-Hinkley on reward / stint mean: drift allowance and alarm threshold.
  double ph_delta = 0.10;
  double ph_lambda = 1.0;
  int ph_min_samples = 3;
  int warmup_steps = 20;  // alarms in the first steps restart the test instead (start-up)
};

class BanditPolicy final : public Policy {
 public:
  explicit BanditPolicy(BanditConfig config = {});
  std::string_view name() const override { return "bandit"; }
  Decision decide(const Features& features, const Arm& current, int64_t now_ns) override;

  // For tests and the decisions log.
  int steps() const { return steps_; }
  int explorationSteps() const { return exploration_steps_; }
  int changesDetected() const { return changes_detected_; }
  double meanReward(size_t arm) const;
  size_t bestArm() const;

 private:
  struct ArmStats {
    double sum = 0;  // discounted
    double n = 0;    // discounted
  };
  int armIndex(const Arm& a) const;
  void observe(size_t arm, double reward);
  bool pageHinkley(double reward);
  void resetStint();
  double index(size_t arm, double total_n, double scale) const;

  BanditConfig config_;
  std::vector<ArmStats> stats_;
  double tokens_;
  int steps_ = 0;
  int exploration_steps_ = 0;
  int changes_detected_ = 0;
  // The current stint on one arm: steps since the switch, observations, and the PH state.
  int stint_arm_ = -1;
  int stint_steps_ = 0;
  int stint_obs_ = 0;
  double stint_mean_ = 0;
  double ph_up_ = 0, ph_down_ = 0;
  bool exploring_ = false;  // the current stint is an exploration visit
  int64_t last_now_ns_ = 0;
  bool ph_alarm_ = false;     // the last pageHinkley() call alarmed
  bool reexploring_ = false;  // a change was detected and untried arms remain
  int per_step_ = 1;          // window steps per training step (>= 1)
};

}  // namespace bpftrain::collector::controller
