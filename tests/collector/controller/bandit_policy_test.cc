#include "collector/controller/bandit_policy.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "tests/collector/controller/synthetic.h"

namespace bpftrain::collector::controller {
namespace {

using namespace testing;

constexpr int64_t kStepNs = 500'000'000;

// A synthetic job whose samples/s depends on the arm and the phase, with ±noise.
struct Env {
  std::mt19937 rng{11};
  double noise = 0.05;
  double step_s = 0.2;                        // training step time the features report
  std::function<double(Topology, int)> mean;  // (arm, step) -> samples/s
  double sample(Topology t, int step) {
    std::uniform_real_distribution<double> u(-noise, noise);
    return mean(t, step) * (1 + u(rng));
  }
};

struct Trace {
  std::vector<Topology> arm_at;  // per step
  int switches = 0;
};

Trace run(BanditPolicy& p, Env& env, int steps, Topology start = Topology::kRing) {
  Trace tr;
  Arm cur{start, PinMode::kNone};
  FeatureExtractor ex("j");
  for (int s = 0; s < steps; ++s) {
    JobState j;
    j.ranks = 1;
    j.step_s = env.step_s;
    j.topology = int(cur.topology);
    j.samples_per_s_per_rank = env.sample(cur.topology, s);
    tr.arm_at.push_back(cur.topology);
    Decision d = p.decide(ex.update(snapshotsOf(j), s * kStepNs), cur, s * kStepNs);
    if (d.change) {
      cur = d.to;
      ++tr.switches;
    }
  }
  return tr;
}

double shareOn(const Trace& tr, Topology t, int from, int to) {
  int n = 0;
  for (int i = from; i < to; ++i) n += tr.arm_at[i] == t;
  return double(n) / (to - from);
}

TEST(BanditPolicy, ConvergesToTheBestArmOnAStationaryStream) {
  Env env;
  env.mean = [](Topology t, int) {
    switch (t) {
      case Topology::kRing:
        return 1000.0;
      case Topology::kHierarchical:
        return 1300.0;
      case Topology::kHalvingDoubling:
        return 1100.0;
      case Topology::kBcube:
        return 1050.0;
    }
    return 0.0;
  };
  BanditPolicy p;
  Trace tr = run(p, env, 600);
  EXPECT_EQ(p.bestArm(), 1u);  // hierarchical
  EXPECT_GE(shareOn(tr, Topology::kHierarchical, 100, 600), 0.9);
  EXPECT_EQ(p.changesDetected(), 0);
}

TEST(BanditPolicy, RespectsTheExplorationBudget) {
  Env env;
  env.noise = 0.08;
  // Near-equal arms: the case where UCB would explore the most.
  env.mean = [](Topology t, int) { return 1000.0 + 10.0 * int(t); };
  BanditConfig c;
  BanditPolicy p(c);
  const int kSteps = 2000;
  run(p, env, 240);
  int after_allowance = p.explorationSteps();
  EXPECT_LE(after_allowance, int(c.budget_fraction * 240 + c.bank_steps));
  Env env2 = env;
  // Continue the same policy on the same stream.
  Trace tr;
  {
    Arm cur{Topology(p.bestArm()), PinMode::kNone};
    FeatureExtractor ex("j");
    for (int s = 240; s < kSteps; ++s) {
      JobState j;
      j.ranks = 1;
      j.topology = int(cur.topology);
      j.samples_per_s_per_rank = env2.sample(cur.topology, s);
      Decision d = p.decide(ex.update(snapshotsOf(j), s * kStepNs), cur, s * kStepNs);
      if (d.change) cur = d.to;
    }
  }
  int steady = p.explorationSteps() - after_allowance;
  std::printf("exploration: %d of the first 240 steps, %d of the next %d (%.2f%%)\n",
              after_allowance, steady, kSteps - 240, 100.0 * steady / (kSteps - 240));
  EXPECT_LE(steady, int(c.budget_fraction * (kSteps - 240)) + 1);
  EXPECT_LE(p.explorationSteps(), int(c.budget_fraction * kSteps + c.bank_steps));
  EXPECT_GT(p.explorationSteps(), 0);
}

TEST(BanditPolicy, ReExploresAndFindsTheNewBestArmAfterAPhaseChange) {
  Env env;
  const int kChange = 300;
  env.mean = [&](Topology t, int step) {
    bool congested = step >= kChange;
    switch (t) {
      case Topology::kRing:
        return congested ? 600.0 : 1300.0;
      case Topology::kHierarchical:
        return congested ? 1100.0 : 1150.0;
      case Topology::kHalvingDoubling:
        return congested ? 800.0 : 1100.0;
      case Topology::kBcube:
        return congested ? 780.0 : 1050.0;
    }
    return 0.0;
  };
  BanditPolicy p;
  Trace tr = run(p, env, 600);
  EXPECT_GE(shareOn(tr, Topology::kRing, 100, kChange), 0.9);
  EXPECT_GE(p.changesDetected(), 1);
  int first_on_new_best = -1;
  for (int s = kChange; s < 600; ++s)
    if (tr.arm_at[s] == Topology::kHierarchical) {
      first_on_new_best = s;
      break;
    }
  ASSERT_GE(first_on_new_best, 0);
  std::printf("phase change at step %d; first step on the new best arm: %d (+%.1f s)\n", kChange,
              first_on_new_best, (first_on_new_best - kChange) * 0.5);
  EXPECT_LE(first_on_new_best - kChange, 20);  // within 10 s of 500 ms steps
  EXPECT_GE(shareOn(tr, Topology::kHierarchical, kChange + 40, 600), 0.9);
}

TEST(BanditPolicy, TrainingStepsLongerThanAWindowStepStretchTrials) {
  Env env;
  env.step_s = 1.2;  // 3 window steps per training step
  env.mean = [](Topology t, int) { return t == Topology::kHalvingDoubling ? 130.0 : 100.0; };
  BanditPolicy p;
  Trace tr = run(p, env, 400);
  EXPECT_EQ(p.bestArm(), 2u);
  EXPECT_GE(shareOn(tr, Topology::kHalvingDoubling, 150, 400), 0.85);
  // Every visit lasts settle + trial training steps: at least 9 window steps.
  int shortest = 1 << 30, run_len = 1;
  bool first = true;  // the initial stint on ring started before the step time was known
  for (size_t i = 1; i < 150; ++i) {
    if (tr.arm_at[i] != tr.arm_at[i - 1]) {
      if (!first) shortest = std::min(shortest, run_len);
      first = false;
      run_len = 1;
    } else {
      ++run_len;
    }
  }
  EXPECT_GE(shortest, 9);
  EXPECT_LE(p.explorationSteps(), int(0.05 * 400 + 18 + 9));
}

TEST(BanditPolicy, UnknownCurrentConfigurationMovesToAnArm) {
  BanditConfig c;
  c.arms = {{Topology::kRing, PinMode::kCompact}, {Topology::kHierarchical, PinMode::kCompact}};
  BanditPolicy p(c);
  JobState j;
  FeatureExtractor ex("j");
  Decision d = p.decide(ex.update(snapshotsOf(j), 0), Arm{Topology::kRing, PinMode::kNone}, 0);
  ASSERT_TRUE(d.change);
  EXPECT_EQ(d.to, (Arm{Topology::kRing, PinMode::kCompact}));
}

}  // namespace
}  // namespace bpftrain::collector::controller
