// The bandit policy over simulated multi-phase runs (bandit_sim.h): each phase against the best
// static configuration, a phase that comes back, the rise detector's cost, slow trials, and
// steady clear links.
#include "tests/collector/controller/bandit_sim.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "collector/controller/bandit_policy.h"

namespace bpftrain::collector::controller {
namespace {

using namespace bandit_sim;

TEST(BanditPolicy, FourPhaseSimulationTracksThePerPhaseBest) {
  // Five seeds of the noisy job; every phase judged on the worst of them.
  std::vector<double> worst(4, 1e9);
  double overall = 0;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    BanditPolicy p;
    SimResult r = simulate(p, fourPhase(), seed);
    std::vector<double> ratio = vsBestStatic(r, fourPhase());
    for (size_t i = 0; i < ratio.size(); ++i) worst[i] = std::min(worst[i], ratio[i]);
    for (double x : ratio) overall += x / 20;
    std::printf("seed %u: %.2f %.2f %.2f %.2f of the best static; %zu decisions:", seed, ratio[0],
                ratio[1], ratio[2], ratio[3], r.decisions.size());
    for (const auto& [t, d] : r.decisions)
      std::printf(" %.1f %s(%.*s)", t, armName(d.to).c_str(), int(d.reason.size()),
                  d.reason.data());
    std::printf("\n");
  }
  std::printf("worst per phase %.2f %.2f %.2f %.2f, mean %.2f\n", worst[0], worst[1], worst[2],
              worst[3], overall);
  // The throttled phase: hierarchical is 3.3x the ring; sticking to a slow arm loses most of it.
  EXPECT_GE(worst[1], 0.85);
  // Clear again after it: the ring must be found again (hierarchical is 0.88x).
  EXPECT_GE(worst[2], 0.92);
  EXPECT_GE(worst[0], 0.9);
  EXPECT_GE(worst[3], 0.85);
  EXPECT_GE(overall, 0.93);
}

// A clear phase that comes back is recalled, not re-explored arm by arm: fewer moves in the
// phases after a congestion, and no phase worse than without the recall (five seeds each).
TEST(BanditPolicy, APhaseThatComesBackIsRecalledNotReexplored) {
  auto movesAfter = [](const SimResult& r, double from) {
    int n = 0;
    for (const auto& [t, d] : r.decisions) n += t >= from;
    return n;
  };
  int moves_with = 0, moves_without = 0, recalled = 0;
  double clear_with = 0, clear_without = 0;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    BanditPolicy with;
    BanditConfig off;
    off.recall_tolerance = 0;
    BanditPolicy without(off);
    const SimResult a = simulate(with, fivePhase(), seed), b = simulate(without, fivePhase(), seed);
    const std::vector<double> ra = vsBestStatic(a, fivePhase()), rb = vsBestStatic(b, fivePhase());
    std::printf(
        "seed %u: clear-again %.2f / %.2f, clear-last %.2f / %.2f (with / without); "
        "moves in clear-last %d / %d; recalled %d\n",
        seed, ra[2], rb[2], ra[4], rb[4], movesAfter(a, 100), movesAfter(b, 100),
        with.phasesRecalled());
    moves_with += movesAfter(a, 100);
    moves_without += movesAfter(b, 100);
    recalled += with.phasesRecalled();
    clear_with += ra[2] + ra[4];
    clear_without += rb[2] + rb[4];
    EXPECT_EQ(without.phasesRecalled(), 0);
  }
  EXPECT_GE(recalled, 5) << "a recall in most runs";
  EXPECT_LT(moves_with, moves_without);
  EXPECT_GE(clear_with, clear_without - 0.05);
}

// A simulated five-phase run as the controller read netlab's: the rise detector finds no rise
// where there is none to cost a phase (five seeds, with and without it).
TEST(BanditPolicy, TheRiseCostsNothingInAFivePhaseRun) {
  double overall_with = 0, overall_without = 0, worst_with = 1e9;
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    BanditPolicy with;
    BanditConfig off;
    off.rise.factor = 0;
    BanditPolicy without(off);
    const auto phases = fivePhaseAsMeasured();
    const SimResult a = simulate(with, phases, seed), b = simulate(without, phases, seed);
    const std::vector<double> ra = vsBestStatic(a, phases), rb = vsBestStatic(b, phases);
    std::printf(
        "seed %u: %.2f %.2f %.2f %.2f %.2f, %zu moves (without: %.2f %.2f %.2f %.2f %.2f, "
        "%zu moves)\n",
        seed, ra[0], ra[1], ra[2], ra[3], ra[4], a.decisions.size(), rb[0], rb[1], rb[2], rb[3],
        rb[4], b.decisions.size());
    for (size_t i = 0; i < ra.size(); ++i) {
      overall_with += ra[i] / 25;
      overall_without += rb[i] / 25;
      worst_with = std::min(worst_with, ra[i]);
    }
  }
  std::printf("overall %.3f / %.3f (with / without), worst phase %.2f\n", overall_with,
              overall_without, worst_with);
  EXPECT_GE(overall_with, overall_without - 0.01);
  EXPECT_GE(worst_with, 0.8);
}

// Halving-doubling as close to the ring in clear phases as netlab's f31b read it (its trials
// 492-584 samples/s against the ring's 494-551), with netlab's +-12% noise, 10 seeds: every
// phase keeps at least 0.8x its best static configuration. (f31b bandit r0 lost its intra-host
// phase after holding halving-doubling into it; the path it took needs a false rise just before
// the onset, which these seeds do not draw: bandit_policy_test.cc's
// TheReexplorationTriesItsUntriedArmsBeforeExploitingAKnownOne and
// ALiftOnAFlatIncumbentLeavesTheOtherFlatArmsFree reproduce it.)
TEST(BanditPolicy, AHalvingDoublingIncumbentFindsHierarchicalAndTheFlatArmsAgain) {
  using T = Topology;
  auto phases = fivePhaseAsMeasured();
  for (int i : {0, 2, 4}) phases[size_t(i)].steps_per_s[T::kHalvingDoubling] = 4.2;
  double worst = 1e9;
  for (uint32_t seed = 1; seed <= 10; ++seed) {
    BanditPolicy p;
    const SimResult r = simulate(p, phases, seed, 0.12);
    const std::vector<double> ratio = vsBestStatic(r, phases);
    std::printf("seed %u: %.2f %.2f %.2f %.2f %.2f;", seed, ratio[0], ratio[1], ratio[2], ratio[3],
                ratio[4]);
    for (const auto& [t, d] : r.decisions)
      std::printf(" %.1f %s(%.*s)", t, armName(d.to).c_str(), int(d.reason.size()),
                  d.reason.data());
    std::printf("\n");
    for (double x : ratio) worst = std::min(worst, x);
  }
  EXPECT_GE(worst, 0.8);
}

TEST(BanditPolicy, ASlowTrialIsAbandonedAfterItsFirstReading) {
  // Lo throttled from the start: hierarchical 2.52 steps/s, the ring 0.76 and halving-doubling
  // 0.9. The ring's congested links are a change from the start: hierarchical first, and
  // halving-doubling, which would send its same-host chunks over them, held back. Every trial of
  // a slow arm (here the ring's re-probes: this simulation has no ring probe to judge its links
  // from hierarchical) ends at its first reading after the settling step.
  using T = Topology;
  std::vector<SimPhase> ph = {
      {60, {{T::kRing, 0.76}, {T::kHierarchical, 2.52}, {T::kHalvingDoubling, 0.9}}, 0.012}};
  BanditConfig c;
  c.arms = {{T::kHierarchical, PinMode::kNone},
            {T::kRing, PinMode::kNone},
            {T::kHalvingDoubling, PinMode::kNone}};
  BanditPolicy p(c);
  SimResult r = simulate(p, ph, 3);
  // Start on ring (the trainer's default), not an arm in this order's first place: it moves.
  double slow_s = r.seconds_on[T::kRing] + r.seconds_on[T::kHalvingDoubling];
  std::printf(
      "on slow arms %.1f s of 60 (halving-doubling %.1f s); decisions %zu, trials lost %d\n",
      slow_s, r.seconds_on[T::kHalvingDoubling], r.decisions.size(), p.trialsAbandoned());
  for (const auto& [t, d] : r.decisions)
    std::printf("  %.1f %s %.*s: %s\n", t, armName(d.to).c_str(), int(d.reason.size()),
                d.reason.data(), d.detail.c_str());
  ASSERT_FALSE(r.decisions.empty());
  EXPECT_EQ(r.decisions[0].second.to.topology, T::kHierarchical);
  EXPECT_EQ(r.decisions[0].second.reason, "change_detected");
  // Before: start-up tried hierarchical at 8.0 s, then halving-doubling (1.2 s on it): 10.1 s
  // on slow arms.
  EXPECT_LE(r.decisions[0].first, 4.0);
  EXPECT_EQ(r.seconds_on[T::kHalvingDoubling], 0.0);
  EXPECT_LE(slow_s, 8);
  EXPECT_GE(r.seconds_on[T::kHierarchical], 50);
  EXPECT_GE(p.trialsAbandoned(), 1);
  for (const auto& [t, d] : r.decisions) {
    if (d.reason != "probe_slower") continue;
    EXPECT_NE(d.detail.find("over 1 readings against hierarchical/none"), std::string::npos)
        << d.detail;
  }
}

// The bench's rep where halving-doubling had won the clear phase when lo was throttled: both
// flat algorithms then crawl (ring 0.76, halving-doubling 0.9 steps/s) and only hierarchical
// keeps same-host gradients off TCP. The same-host RTT the flat topology shows says which arm
// to try first, and a slow phase's long steps must not spend the bank on the ring before it.
TEST(BanditPolicy, SameHostCongestionOnAFlatTopologyTriesHierarchicalFirst) {
  using T = Topology;
  std::vector<SimPhase> ph = {
      {25, {{T::kRing, 3.04}, {T::kHierarchical, 2.54}, {T::kHalvingDoubling, 3.4}}},
      {60, {{T::kRing, 0.76}, {T::kHierarchical, 2.52}, {T::kHalvingDoubling, 0.9}}, 0.012, 0.0015},
  };
  for (uint32_t seed = 1; seed <= 5; ++seed) {
    BanditPolicy p;
    SimResult r = simulate(p, ph, seed);
    double first_hierarchical = -1;
    for (const auto& [t, d] : r.decisions)
      if (t >= 25 && d.to.topology == T::kHierarchical && first_hierarchical < 0)
        first_hierarchical = t;
    std::printf("seed %u: hierarchical %.1f s after the throttle; throttled phase %.2f of it\n",
                seed, first_hierarchical - 25, vsBestStatic(r, ph)[1]);
    EXPECT_GE(first_hierarchical, 25) << "seed " << seed;
    EXPECT_LE(first_hierarchical, 30) << "seed " << seed;
    EXPECT_GE(vsBestStatic(r, ph)[1], 0.85) << "seed " << seed;
    // The other flat topology sends its same-host chunks over the congested links too: not
    // tried while they stay congested; the only flat moves are re-probes of the arm the change
    // drove us from.
    for (const auto& [t, d] : r.decisions) {
      if (t >= 25 && d.to.topology != T::kHierarchical) {
        EXPECT_NE(d.detail.find("re-probe"), std::string::npos)
            << "seed " << seed << " at " << t << ": " << d.detail;
      }
    }
  }
}

TEST(BanditPolicy, NoisySteadyClearLinksMakeNoDecisionsAfterStartUp) {
  // 100 s of one clear phase with +-12% step noise: after trying the arms once at start-up (10
  // s of warm-up, then the trials), no phase change is detected, the ring is kept, and nothing
  // moves for a minute (issue 9: steady state, zero decisions).
  using T = Topology;
  std::vector<SimPhase> ph = {
      {100, {{T::kRing, 3.04}, {T::kHierarchical, 2.54}, {T::kHalvingDoubling, 2.8}}}};
  for (uint32_t seed = 1; seed <= 8; ++seed) {
    BanditPolicy p;
    SimResult r = simulate(p, ph, seed, 0.12);
    double startup_end = 0, next = 1e9;
    for (const auto& [t, d] : r.decisions) {
      if (t <= 25) {
        startup_end = t;
      } else {
        next = std::min(next, t);
      }
    }
    EXPECT_GE(next - startup_end, 60) << "seed " << seed;
    EXPECT_EQ(p.changesDetected(), 0) << "seed " << seed;
    EXPECT_GE(r.seconds_on[T::kRing], 87) << "seed " << seed;
    EXPECT_GE(startup_end, 10) << "seed " << seed << ": an arm tried during warm-up";
  }
}

}  // namespace
}  // namespace bpftrain::collector::controller
