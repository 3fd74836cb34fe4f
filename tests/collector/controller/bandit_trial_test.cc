// The bandit's trials (bandit_policy.h): what a lost trial leaves of the arms' estimates and of
// the incumbent's change detection, and how a ring trial that meets a congested link ends.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "collector/controller/bandit_policy.h"
#include "tests/collector/controller/bandit_links.h"
#include "tests/collector/controller/rules_harness.h"

namespace bpftrain::collector::controller {
namespace {

using namespace bandit_links;

// An uplink throttled as a trial begins: the trial (here a routine re-visit of hierarchical or
// halving-doubling, in the uplink e2e test an exploit of hierarchical's start-up mean) reads
// the throttle, is abandoned against the ring's clear level, and the ring, back, must still see
// the change against its level before the trial. In 1 of 7 e2e runs it did not: its stint began
// afresh on the throttled readings (no drop for Page-Hinkley) with its links never seen clear
// (no link change), and the job ran the throttled ring through the phase.
TEST(BanditPolicy, AnOnsetDuringALostTrialIsSeenOnTheIncumbentItReturnsTo) {
  namespace rh = rules_harness;
  BanditPolicy p;
  double onset = -1;
  auto sw = rh::runOnArm(p, 150, [&](double t, const Arm& a) {
    // The onset comes with the first move off the ring after start-up.
    if (onset < 0 && t >= 30 && a.topology != Topology::kRing) onset = t;
    return rh::linkModel(onset >= 0 ? rh::Phase::kUplinkHidden : rh::Phase::kClear, a, true);
  });
  std::string all;
  for (const rh::Switch& s : sw)
    all += std::to_string(s.t) + " " + armName(s.to) + " (" + s.reason + ": " + s.detail + ")\n";
  std::printf("%s", all.c_str());
  ASSERT_GE(onset, 0) << "no trial after start-up\n" << all;
  // The trial's end (back to the ring), then off the ring again on the change.
  auto back = std::find_if(sw.begin(), sw.end(), [&](const rh::Switch& s) {
    return s.t >= onset && s.to.topology == Topology::kRing;
  });
  ASSERT_TRUE(back != sw.end()) << "the trial was kept\n" << all;
  EXPECT_EQ(back->reason, "probe_slower") << all;
  ASSERT_TRUE(std::next(back) != sw.end()) << "the throttled ring kept\n" << all;
  EXPECT_EQ(std::next(back)->reason, "change_detected") << all;
  EXPECT_LE(std::next(back)->t - onset, 3.0) << all;
  EXPECT_GE(p.changesDetected(), 1);
}

// Drives the bandit for `seconds` on clear same-host links at `sps(topology, ns)`, the ring's
// readings at `ring_settling` x that for its first 3 s after a switch to it (netlab's ring after
// another topology). Returns the decisions as text, the topology at the end and the last switch.
struct SettlingRun {
  std::string log;
  Topology last = Topology::kRing;
  int64_t last_switch_ns = 0;
};
SettlingRun runWithRingSettling(BanditPolicy& p, double seconds,
                                const std::function<double(Topology, int64_t)>& sps,
                                double ring_settling) {
  SettlingRun r;
  Arm cur{};
  for (int64_t ns = 0; ns <= int64_t(seconds * 1e9); ns += kStepNs) {
    double v = sps(cur.topology, ns);
    if (cur.topology == Topology::kRing && r.last_switch_ns > 0 &&
        ns - r.last_switch_ns < 3'000'000'000)
      v *= ring_settling;
    Decision d = p.decide(linkFeatures(cur.topology, v, v, 1.5e-3), cur, ns);
    if (!d.change) continue;
    r.log += std::to_string(double(ns) * 1e-9) + " " + armName(d.to) + " (" +
             std::string(d.reason) + ": " + d.detail + ")\n";
    cur = d.to;
    r.last_switch_ns = ns;
  }
  r.last = cur.topology;
  std::printf("%s", r.log.c_str());
  return r;
}

// Back from a lost trial, the ring's first readings run low (netlab: after another topology's
// stint; f32c bandit r0 read 581 and 513 samples/s after hierarchical's start-up trial, around
// 620 before it). They are no part of the next trial's reference: halving-doubling at 0.99x
// the ring's level must not win its start-up trial against a reference they deflate.
TEST(BanditPolicy, TheRingsFirstReadingsBackFromATrialAreNotItsLevel) {
  BanditPolicy p;
  const SettlingRun r = runWithRingSettling(
      p, 60,
      [](Topology t, int64_t) {
        return t == Topology::kRing ? 600 : t == Topology::kHalvingDoubling ? 594 : 480;
      },
      0.8);
  EXPECT_EQ(r.last, Topology::kRing) << r.log;
  EXPECT_NE(r.log.find("halving-doubling/none at"), std::string::npos)
      << "halving-doubling was tried and lost\n"
      << r.log;
}

// One stalled step among the incumbent's readings is no part of its level, which start-up
// trials are judged against: f39b bandit r0 (five-phase) read the ring at 379 samples/s once at
// the end of start-up, between readings of 750-890; its level read 701, and hierarchical's trial
// (750, 0.96x the ring) was kept through the clear phases.
TEST(BanditPolicy, OneStalledReadingDoesNotLowerTheLevelAStartUpTrialMustBeat) {
  BanditPolicy p;
  // Step 20 is the reading at the end of start-up (BanditConfig::warmup_steps); the stall comes
  // two readings later, before the first trial.
  const LinkRun r = runLinks(
      p, Arm{}, 120,
      [](Topology t, int i) {
        if (t == Topology::kRing) return i == 22 ? 380.0 : 780.0;
        return t == Topology::kHierarchical ? 750.0 : 740.0;
      },
      [](Topology, int) { return 1.5e-3; });
  int trials = 0;
  for (const auto& [i, d] : r.decisions) trials += d.to.topology != Topology::kRing;
  EXPECT_GE(trials, 1) << "start-up tried no arm";
  EXPECT_EQ(r.on.back(), Topology::kRing);
  const auto on_ring = std::count(r.on.begin() + 40, r.on.end(), Topology::kRing);
  EXPECT_GE(double(on_ring) / double(r.on.size() - 40), 0.9) << "the clear phase on the ring";
}

// An uplink's lift seen on hierarchical (its samples/s rising): the ring, tried first, is kept on
// its links unless slow, as a probe-driven re-probe of it is, though its first readings after
// hierarchical run low (here 0.85x its level for 3 s, under hierarchical's risen reading). In an
// uplink e2e run it read 547 against hierarchical's 568, lost, and was not tried again: 7% of
// the clear phase on the ring.
TEST(BanditPolicy, TheRingTriedOnALiftIsKeptOnItsLinks) {
  const int64_t kLiftNs = 50'000'000'000;
  BanditPolicy p;
  const SettlingRun r = runWithRingSettling(
      p, 80,
      [&](Topology t, int64_t ns) {
        const bool lifted = ns >= kLiftNs;
        return t == Topology::kRing           ? (lifted ? 620 : 300)
               : t == Topology::kHierarchical ? (lifted ? 560 : 380)
                                              : (lifted ? 540 : 310);
      },
      0.85);
  ASSERT_NE(r.log.find("rise change"), std::string::npos) << "no lift seen\n" << r.log;
  EXPECT_EQ(r.last, Topology::kRing) << r.log;
  EXPECT_LE(double(r.last_switch_ns - kLiftNs) * 1e-9, 10.0) << "on the ring for good soon\n"
                                                             << r.log;
}

// An arm that lost a trial is not exploited again at once on its older, better mean. In the
// four-phase after-run (clear-again and uplink, load 7-9) the bandit alternated every 3-8 s:
// "exploit: hierarchical at 268.9 samples/s beats ring at 244.4", the trial read 190 over 4
// readings, back to the ring (probe_slower), and the discounted mean (0.99 a step, tens of
// older readings) still held 260. Here hierarchical reads 280 once settled but 190 for its
// first 6 window steps after each switch; the ring 245.
TEST(BanditPolicy, AnArmThatLostATrialIsNotExploitedAgainOnItsOlderMean) {
  BanditConfig c;
  c.arms = {{Topology::kHierarchical, PinMode::kNone}, {Topology::kRing, PinMode::kNone}};
  BanditPolicy p(c);
  Arm cur{Topology::kHierarchical, PinMode::kNone};
  int on_arm = 0, exploits = 0;
  std::vector<std::string> log;
  for (int i = 0; i < 200; ++i) {  // 100 s
    const bool hier = cur.topology == Topology::kHierarchical;
    const double sps = hier ? (on_arm < 6 && i > 10 ? 190 : 280) : 245;
    Features f = linkFeatures(cur.topology, sps, sps, 1.5e-3);
    // Hierarchical's first 40 s: its mean builds up; then the ring is forced on it (as the
    // re-probe that wins does).
    if (i == 80) {
      cur = Arm{Topology::kRing, PinMode::kNone};
      on_arm = 0;
      continue;
    }
    Decision d = p.decide(f, cur, int64_t(i) * kStepNs);
    ++on_arm;
    if (!d.change) continue;
    log.push_back(std::to_string(i) + " " + armName(d.to) + " " + std::string(d.reason) + ": " +
                  d.detail);
    if (i > 80 && d.reason == "exploit") ++exploits;
    cur = d.to;
    on_arm = 0;
  }
  std::string all;
  for (const std::string& l : log) all += l + "\n";
  EXPECT_LE(exploits, 1) << all;
}

// A ring trial (here start-up's, in the field usually the re-probe) that meets a congested link
// ends between steps as soon as the window holds only the ring's samples, without waiting for
// its settling step (a throttled step is 1.3-1.9 s): on a far-past ring link with the latest
// reading at or below 0.7x the trial's reference, on two looks.
TEST(BanditPolicy, BetweenStepsAFarPastRingLinkEndsARingTrial) {
  auto feat = [](Topology t, double sps, double rtt) {
    Features f = linkFeatures(t, sps, sps, rtt);
    f.step_p50_s = 1.2;  // slow steps: settling and trials last 3 window steps per reading
    return f;
  };
  BanditPolicy p;
  Arm cur{Topology::kHierarchical, PinMode::kNone};
  int64_t ns = 0;
  Decision d;
  for (int i = 0; i < 60 && !d.change; ++i, ns += kStepNs)
    d = p.decide(feat(cur.topology, 300, 12e-3), cur, ns);
  ASSERT_TRUE(d.change);
  ASSERT_EQ(d.to.topology, Topology::kRing) << d.detail;  // the first untried arm
  cur = d.to;
  // The ring runs, throttled; its first window steps settle.
  for (int i = 0; i < 3; ++i, ns += kStepNs)
    ASSERT_FALSE(p.decide(feat(Topology::kRing, 90, 10e-3), cur, ns).change);
  // A clear link is no verdict between steps; a far-past one on two looks is.
  EXPECT_FALSE(p.react(feat(Topology::kRing, 90, 1.5e-3), cur, ns + 100'000'000).change);
  EXPECT_FALSE(p.react(feat(Topology::kRing, 90, 10e-3), cur, ns + 200'000'000).change);
  d = p.react(feat(Topology::kRing, 90, 10e-3), cur, ns + 300'000'000);
  ASSERT_TRUE(d.change);
  EXPECT_EQ(d.to.topology, Topology::kHierarchical);
  EXPECT_EQ(d.reason, "probe_slower");
  EXPECT_NE(d.detail.find("between steps"), std::string::npos) << d.detail;
  EXPECT_EQ(p.trialsAbandoned(), 1);
}

}  // namespace
}  // namespace bpftrain::collector::controller
