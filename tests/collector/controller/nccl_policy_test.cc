// The NCCL controller's arm choice on synthetic observations: NCCL's choice is measured first,
// then each pair the profiler showed, then the fastest is kept; nothing moves while ranks
// disagree, on disturbed steps, or without a clear winner; an arm NCCL did not follow is
// excluded; a size-mix change or drift re-explores.
#include "collector/controller/nccl_policy.h"

#include <gtest/gtest.h>

#include <map>

namespace bpftrain::collector::controller {
namespace {

constexpr NcclArm kNccl{};
constexpr NcclArm kTreeLl{0, 0};
constexpr NcclArm kRingLl128{1, 1};
constexpr NcclArm kRingSimple{1, 2};
constexpr int64_t kStep = 500'000'000;

// Plays the job: each arm has a fixed time per collective; decisions apply at the next step.
struct Job {
  NcclPolicy policy;
  std::map<NcclArm, double> seconds;
  std::vector<NcclArm> available{kTreeLl, kRingLl128};
  NcclArm in_force = kNccl;
  double bytes = 1 << 20;
  int64_t now = 0;
  std::vector<NcclChoice> moves;

  explicit Job(NcclPolicyConfig c = {}) : policy(c) {}
  NcclObservation observe() const {
    NcclObservation o;
    o.available = available;
    o.in_force = in_force;
    o.collectives = 100;
    o.mean_seconds = seconds.at(in_force);
    o.mean_bytes = bytes;
    return o;
  }
  NcclChoice step(NcclObservation o) {
    now += kStep;
    NcclChoice d = policy.decide(o, now);
    if (d.change) {
      in_force = d.to;
      moves.push_back(d);
    }
    return d;
  }
  NcclChoice step() { return step(observe()); }
};

TEST(NcclPolicy, ExploresEveryShownPairThenKeepsTheFastest) {
  Job job;
  job.seconds = {{kNccl, 800e-6}, {kTreeLl, 550e-6}, {kRingLl128, 875e-6}};
  for (int i = 0; i < 40; ++i) job.step();
  ASSERT_EQ(job.moves.size(), 3u);
  EXPECT_EQ(job.moves[0].to, kTreeLl);
  EXPECT_EQ(job.moves[0].reason, "explore");
  EXPECT_EQ(job.moves[1].to, kRingLl128);
  EXPECT_EQ(job.moves[1].reason, "explore");
  EXPECT_EQ(job.moves[2].to, kTreeLl);
  EXPECT_EQ(job.moves[2].reason, "exploit");
  EXPECT_EQ(job.in_force, kTreeLl);
  EXPECT_NEAR(job.policy.meanSeconds(kTreeLl), 550e-6, 1e-12);
  EXPECT_NEAR(job.policy.meanSeconds(kNccl), 800e-6, 1e-12);
  EXPECT_EQ(job.policy.explorations(), 2);
}

TEST(NcclPolicy, EachArmIsMeasuredForSettlePlusTrialSteps) {
  NcclPolicyConfig c;
  c.settle_steps = 1;
  c.trial_steps = 3;
  Job job(c);
  job.seconds = {{kNccl, 800e-6}, {kTreeLl, 550e-6}, {kRingLl128, 875e-6}};
  int steps = 0;
  while (job.moves.empty() && steps < 100) {
    job.step();
    ++steps;
  }
  EXPECT_EQ(steps, 4);  // 1 settling + 3 readings of NCCL's choice before the first move
  EXPECT_EQ(job.policy.readings(kNccl), 3);
}

TEST(NcclPolicy, NcclsOwnChoiceStaysWhenNoPairBeatsItByTheMargin) {
  Job job;
  job.seconds = {{kNccl, 800e-6}, {kTreeLl, 780e-6}, {kRingLl128, 900e-6}};  // 2.5%: no win
  for (int i = 0; i < 40; ++i) job.step();
  ASSERT_EQ(job.moves.size(), 3u);
  EXPECT_EQ(job.moves.back().to, kNccl);  // back to no decision
  EXPECT_EQ(job.moves.back().reason, "exploit");
  EXPECT_EQ(job.in_force, kNccl);
}

TEST(NcclPolicy, OnePairShownAndItIsNcclsChoiceMeansNoDecisionAtAll) {
  Job job;
  job.available = {kRingSimple};
  job.seconds = {{kNccl, 800e-6}, {kRingSimple, 800e-6}};
  for (int i = 0; i < 40; ++i) job.step();
  // Ring/simple is tried once (it may differ from NCCL's mix), then NCCL's choice returns.
  ASSERT_EQ(job.moves.size(), 2u);
  EXPECT_EQ(job.in_force, kNccl);
}

TEST(NcclPolicy, NothingIsDecidedWhileRanksDisagreeOrStepsAreDisturbed) {
  Job job;
  job.seconds = {{kNccl, 800e-6}, {kTreeLl, 550e-6}, {kRingLl128, 875e-6}};
  for (int i = 0; i < 20; ++i) {
    NcclObservation o = job.observe();
    o.consistent = false;
    EXPECT_FALSE(job.step(o).change);
  }
  for (int i = 0; i < 20; ++i) {
    NcclObservation o = job.observe();
    o.host_disturbed = true;
    EXPECT_FALSE(job.step(o).change);
  }
  EXPECT_EQ(job.policy.readings(kNccl), 0);
  for (int i = 0; i < 20; ++i) {
    NcclObservation o = job.observe();
    o.collectives = 2;  // too few timed collectives for a reading
    EXPECT_FALSE(job.step(o).change);
  }
  EXPECT_TRUE(job.moves.empty());
}

TEST(NcclPolicy, APairNcclDidNotRunIsExcluded) {
  Job job;
  job.seconds = {{kNccl, 800e-6}, {kTreeLl, 500e-6}, {kRingLl128, 600e-6}};
  for (int i = 0; i < 40; ++i) {
    NcclObservation o = job.observe();
    // Tree/LL is shown, but the tuner cannot apply it: NCCL keeps running its own mix.
    if (o.in_force == kTreeLl) {
      o.followed = 0.1;
      o.mean_seconds = 800e-6;
    }
    job.step(o);
  }
  EXPECT_EQ(job.in_force, kRingLl128);
  EXPECT_EQ(job.policy.readings(kTreeLl), 0);
}

TEST(NcclPolicy, ASizeMixChangeGoesBackToNcclsChoiceAndReexplores) {
  Job job;
  job.seconds = {{kNccl, 800e-6}, {kTreeLl, 550e-6}, {kRingLl128, 875e-6}};
  for (int i = 0; i < 40; ++i) job.step();
  ASSERT_EQ(job.in_force, kTreeLl);
  const size_t before = job.moves.size();
  job.bytes = 16 << 20;  // 16x larger collectives: a new phase
  job.seconds = {{kNccl, 8e-3}, {kTreeLl, 12e-3}, {kRingLl128, 6e-3}};
  for (int i = 0; i < 60; ++i) job.step();
  ASSERT_GT(job.moves.size(), before);
  EXPECT_EQ(job.moves[before].to, kNccl);
  EXPECT_EQ(job.moves[before].reason, "change_detected");
  EXPECT_EQ(job.in_force, kRingLl128);  // the new mix's fastest
}

TEST(NcclPolicy, DriftOfTheKeptArmReexplores) {
  Job job;
  job.seconds = {{kNccl, 800e-6}, {kTreeLl, 550e-6}, {kRingLl128, 875e-6}};
  for (int i = 0; i < 40; ++i) job.step();
  ASSERT_EQ(job.in_force, kTreeLl);
  const size_t before = job.moves.size();
  job.seconds = {{kNccl, 700e-6}, {kTreeLl, 1100e-6}, {kRingLl128, 500e-6}};  // same sizes
  for (int i = 0; i < 60; ++i) job.step();
  ASSERT_GT(job.moves.size(), before);
  EXPECT_EQ(job.moves[before].reason, "change_detected");
  EXPECT_EQ(job.in_force, kRingLl128);
}

TEST(NcclPolicy, ArmNamesAndIndices) {
  EXPECT_EQ(ncclArmName(kNccl), "nccl");
  EXPECT_EQ(ncclArmName(kRingLl128), "ring/ll128");
  EXPECT_EQ(ncclArmName(NcclArm{6, 2}), "pat/simple");
  EXPECT_EQ(ncclIndex(kNcclAlgorithmNames, "nvls_tree"), 5);
  EXPECT_EQ(ncclIndex(kNcclProtocolNames, "simple"), 2);
  EXPECT_EQ(ncclIndex(kNcclCollectiveNames, "allreduce"), 4);
  EXPECT_EQ(ncclIndex(kNcclCollectiveNames, "alltoall"), -1);
}

}  // namespace
}  // namespace bpftrain::collector::controller
