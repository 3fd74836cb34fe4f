#include "collector/controller/rules_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <random>

#include "tests/collector/controller/rules_harness.h"
#include "tests/collector/controller/synthetic.h"

namespace bpftrain::collector::controller {
namespace {

using namespace testing;
using namespace rules_harness;

// The demo's scenario: same-host links congested, then lifted. Up within ~1 s; the way back
// comes from probing the ring (hierarchical cannot show same-host links), and probes that fail
// climb back within ~1.5 s and back off.
TEST(RulesPolicy, IntraHostCongestionUpAndBackByProbingTheRing) {
  RulesPolicy p;
  auto sw = runPhases(p, 110, [](double t) {
    return t >= 30 && t < 70 ? Phase::kIntraHostCongested : Phase::kClear;
  });
  ASSERT_GE(sw.size(), 2u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_GE(sw[0].t, 30.0);
  EXPECT_LE(sw[0].t, 30.5);  // throughput 0.3x calm: decisive on its first step
  int failed_probes = 0;
  for (size_t i = 1; i + 1 < sw.size(); i += 2) {
    EXPECT_EQ(sw[i].reason, "reprobe");
    EXPECT_EQ(sw[i].to.topology, Topology::kRing);
    if (sw[i].t < 70) {
      ++failed_probes;
      EXPECT_EQ(sw[i + 1].to.topology, Topology::kHierarchical);
      EXPECT_LE(sw[i + 1].t - sw[i].t, 1.6) << "a failed probe must end quickly";
    }
  }
  EXPECT_GE(failed_probes, 1);
  EXPECT_LE(failed_probes, 4);
  // Ends on the ring, reached at most one (backed-off) probe interval after the lift.
  EXPECT_EQ(sw.back().to.topology, Topology::kRing);
  EXPECT_GE(sw.back().t, 70.0);
  EXPECT_LE(sw.back().t, 70.0 + 32.5);
  for (const Switch& s : sw) EXPECT_NE(s.to.topology, Topology::kHalvingDoubling);
}

// Throttled lo as the first step of a ring probe read it on netlab: jitter past the severe
// threshold (102 ms). Same-host congestion climbs to hierarchical however severe, and a failed
// probe goes back to the rung it left: halving-doubling sends its same-host chunks over the
// throttled loopback too (97 samples/s for 16 s on netlab before this).
TEST(RulesPolicy, SevereSameHostCongestionClimbsToHierarchicalAndAFailedProbeBackToIt) {
  RulesPolicy p;
  auto sw = runOnArm(p, 110, [](double t, const Arm& a) {
    JobState j = linkModel(t >= 30 && t < 70 ? Phase::kIntraHostCongested : Phase::kClear, a);
    if (t >= 30 && t < 70 && a.topology == Topology::kRing) j.same_host = {9e-3, 150e-3, 6e6};
    return j;
  });
  for (const Switch& s : sw)
    std::printf("%.1f s: %s (%s)\n", s.t, armName(s.to).c_str(), s.reason.c_str());
  ASSERT_GE(sw.size(), 2u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_EQ(sw[0].reason, "severe_congestion");
  int failed_probes = 0;
  for (size_t i = 1; i + 1 < sw.size(); ++i)
    if (sw[i].reason == "reprobe" && sw[i].t < 70) {
      ++failed_probes;
      EXPECT_EQ(sw[i + 1].to.topology, Topology::kHierarchical) << sw[i + 1].t;
    }
  EXPECT_GE(failed_probes, 1);
  for (const Switch& s : sw) EXPECT_NE(s.to.topology, Topology::kHalvingDoubling) << s.t;
  EXPECT_EQ(sw.back().to.topology, Topology::kRing);
}

// The latest reading counts as decisive before the window mean does only with the signal far
// past its threshold (decisive_signal_factor, 1.5x); near the threshold it needs the window far
// down or a second step.
Features decisiveFeatures(double latest, double window, double same_host_rtt_s) {
  Features f;
  f.job = "j";
  f.has_steps = f.has_transport = f.has_links = true;
  f.ranks = 4;
  f.topology = Topology::kRing;
  f.pinning = PinMode::kNone;
  f.step_p50_s = f.step_p99_s = 0.6;
  f.allreduce_share = 0.5;
  f.samples_per_s = latest;
  f.samples_per_s_window = window;
  LinkSignals& sh = f.links[int(Link::kSameHost)];
  sh.seen = true;
  sh.samples = 500;
  sh.rtt_p50_s = same_host_rtt_s;
  sh.rtt_p99_s = same_host_rtt_s * 3;
  sh.rtt_jitter_s = std::min(sh.rtt_p99_s - sh.rtt_p50_s, 0.012);  // under the jitter threshold
  sh.queued_bytes_p99 = 6e6;
  return f;
}

TEST(RulesPolicy, ALatestReadingFarDownDecidesOnceTheWindowFollowsOrTheSignalIsFarPast) {
  struct Case {
    const char* name;
    double latest, window, rtt_s;
    bool climbs;
  };
  for (const Case& c : {Case{"latest 0.45x, window at 0.58x, rtt 1.2x", 90, 116, 6e-3, false},
                        Case{"window at 0.45x, rtt 1.2x", 90, 90, 6e-3, true},
                        Case{"latest 0.45x, window at 0.8x, rtt 1.2x", 90, 160, 6e-3, false},
                        Case{"latest 0.45x, window at 0.8x, rtt 1.8x", 90, 160, 9e-3, true},
                        Case{"latest 0.65x, window at 0.95x, rtt 1.8x", 130, 190, 9e-3, true},
                        Case{"latest 0.8x, window at 0.95x, rtt 1.8x", 160, 190, 9e-3, false}}) {
    SCOPED_TRACE(c.name);
    RulesPolicy p;
    const Arm ring{};
    int64_t ns = 0;
    for (int i = 0; i < 40; ++i, ns += kStepNs)  // 20 s calm at 200 samples/s
      ASSERT_FALSE(p.decide(decisiveFeatures(200, 200, 1.5e-3), ring, ns).change);
    // The congested step: RTT up, the latest reading down.
    Decision d = p.decide(decisiveFeatures(c.latest, c.window, c.rtt_s), ring, ns);
    EXPECT_EQ(d.change, c.climbs) << d.detail;
    if (c.climbs) {
      EXPECT_EQ(d.to.topology, Topology::kHierarchical);
      EXPECT_NE(d.detail.find("decisive"), std::string::npos) << d.detail;
    } else if (c.window <= 0.7 * 200) {
      // Under the plain congestion fraction it counts as one step: a second one climbs.
      EXPECT_TRUE(
          p.decide(decisiveFeatures(c.latest, c.window, c.rtt_s), ring, ns + kStepNs).change);
    }
  }
}

// Between window steps (react()) only a signal far past its threshold with the latest reading
// confirming it on two consecutive looks moves the job, and a refused look changes nothing
// decide() does afterwards.
TEST(RulesPolicy, BetweenStepsOnlyAFarPastSignalTheLatestReadingConfirmsClimbs) {
  const Arm ring{};
  auto calm = [&](RulesPolicy& p, int64_t& ns) {
    for (int i = 0; i < 40; ++i, ns += kStepNs)
      ASSERT_FALSE(p.decide(decisiveFeatures(200, 200, 1.5e-3), ring, ns).change);
  };
  {
    RulesPolicy p;
    int64_t ns = 0;
    calm(p, ns);
    // Far past (1.8x) but the latest reading only 0.8x calm: no.
    EXPECT_FALSE(p.react(decisiveFeatures(160, 190, 9e-3), ring, ns + 100'000'000).change);
    // Near the threshold (1.2x) with the latest reading at 0.45x: no (decide()'s window decides).
    EXPECT_FALSE(p.react(decisiveFeatures(90, 190, 6e-3), ring, ns + 200'000'000).change);
    // Far past with the latest reading at 0.65x: a second look confirms it, then it climbs
    // between steps and says so.
    EXPECT_FALSE(p.react(decisiveFeatures(130, 190, 9e-3), ring, ns + 300'000'000).change);
    Decision d = p.react(decisiveFeatures(130, 190, 9e-3), ring, ns + 400'000'000);
    ASSERT_TRUE(d.change);
    EXPECT_EQ(d.to.topology, Topology::kHierarchical);
    EXPECT_EQ(d.reason, "congestion");
    EXPECT_NE(d.detail.find("between steps"), std::string::npos) << d.detail;
    // The move counts for the dwell: on hierarchical, nothing moves back down at once.
    const Arm hier{Topology::kHierarchical, PinMode::kNone};
    Features up = decisiveFeatures(400, 400, 1.5e-3);
    up.topology = Topology::kHierarchical;
    EXPECT_FALSE(p.decide(up, hier, ns + kStepNs).change);
  }
  {
    // Refused looks leave decide() as it was: the step stream alone still needs its two steps
    // for a near-threshold signal whose window follows.
    RulesPolicy p;
    int64_t ns = 0;
    calm(p, ns);
    for (int k = 1; k <= 4; ++k)
      ASSERT_FALSE(p.react(decisiveFeatures(150, 150, 6e-3), ring, ns + k * 100'000'000).change);
    EXPECT_FALSE(p.decide(decisiveFeatures(130, 130, 6e-3), ring, ns).change);
    EXPECT_TRUE(p.decide(decisiveFeatures(130, 130, 6e-3), ring, ns + kStepNs).change);
  }
  {
    // No calm reference yet (the job's first steps): nothing between steps.
    RulesPolicy p;
    EXPECT_FALSE(p.react(decisiveFeatures(10, 10, 20e-3), ring, 0).change);
  }
  {
    // Three times the threshold (16 ms against 5) with the latest reading at 0.65x: the first
    // look climbs; at 2.8x (14 ms) it still takes the second.
    RulesPolicy p;
    int64_t ns = 0;
    calm(p, ns);
    Decision d = p.react(decisiveFeatures(130, 190, 16e-3), ring, ns + 100'000'000);
    ASSERT_TRUE(d.change) << "one look at 3.2x";
    EXPECT_EQ(d.to.topology, Topology::kHierarchical);
    RulesPolicy q;
    ns = 0;
    calm(q, ns);
    EXPECT_FALSE(q.react(decisiveFeatures(130, 190, 14e-3), ring, ns + 100'000'000).change);
    EXPECT_TRUE(q.react(decisiveFeatures(130, 190, 14e-3), ring, ns + 200'000'000).change);
  }
}

// The way back: a re-probe of the ring right after the congestion lifted reads the switch's
// slow steps and a marginal RTT for a few seconds (netlab, clear-again: same_host 5.2 ms with
// the window at 113 samples/s against hierarchical's 176). That is no failed descent: for
// descent_settle only a far-past signal climbs back, and the ring, faster once settled, stays.
// A real one (still throttled: 10 ms, the ring at 0.4x) still climbs back within a second.
TEST(RulesPolicy, AMarginalSignalRightAfterAStepDownIsNoFailedDescent) {
  auto wayBack = [](double rtt_after_s, double sps_after) {
    RulesPolicy p;
    Arm cur{};
    int64_t ns = 0;
    std::vector<std::pair<double, Decision>> moves;
    auto step = [&](Features f) {
      f.topology = cur.topology;
      Decision d = p.decide(f, cur, ns);
      if (d.change) {
        moves.push_back({double(ns) * 1e-9, d});
        cur = d.to;
      }
      ns += kStepNs;
    };
    for (int i = 0; i < 40; ++i) step(decisiveFeatures(200, 200, 1.5e-3));  // calm ring
    while (cur.topology == Topology::kRing && ns < 30'000'000'000)
      step(decisiveFeatures(80, 80, 10e-3));  // lo throttled
    EXPECT_EQ(cur.topology, Topology::kHierarchical);
    // On hierarchical until the re-probe (its same-host sockets carry control messages at
    // 6-18 ms, throttled or not); the congestion lifts meanwhile.
    while (cur.topology == Topology::kHierarchical && ns < 60'000'000'000)
      step(decisiveFeatures(176, 176, 12e-3));
    EXPECT_EQ(cur.topology, Topology::kRing);
    const double reprobe_s = moves.back().first;
    // The switch's first 2.5 s on the ring, then the ring as the phase has it.
    for (int i = 0; i < 5; ++i) step(decisiveFeatures(113, 113, 5.2e-3));
    for (int i = 0; i < 40; ++i) step(decisiveFeatures(sps_after, sps_after, rtt_after_s));
    for (const auto& [t, d] : moves)
      if (t > reprobe_s && d.to.topology == Topology::kHierarchical) return t - reprobe_s;
    return -1.0;
  };
  // Clear again: the ring runs 320 after settling; it is kept.
  EXPECT_LT(wayBack(1.5e-3, 320), 0);
  // Still throttled after the switch settled: 10 ms, 80 samples/s: back up 3 s after the
  // re-probe (descent_settle; the far-past looks between steps would take it sooner).
  const double failed = wayBack(10e-3, 80);
  EXPECT_GE(failed, 2.9);
  EXPECT_LE(failed, 3.1);
}

// The uplink at 2 Gbit/s as measured: no link signal, only throughput down with the allreduce's
// share up. The ring's slowdown tries hierarchical (reason slowdown), which runs faster and is
// kept; re-probes of the ring climb back while the uplink is slow, and the ring comes back after
// it lifts.
TEST(RulesPolicy, ASlowdownTheLinksDoNotShowTriesTheNextRungAndKeepsItWhenFaster) {
  RulesPolicy p;
  auto sw = runPhases(
      p, 130, [](double t) { return t >= 30 && t < 80 ? Phase::kUplinkHidden : Phase::kClear; });
  for (const Switch& s : sw)
    std::printf("%.1f s: %s (%s)\n", s.t, armName(s.to).c_str(), s.reason.c_str());
  ASSERT_GE(sw.size(), 2u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_EQ(sw[0].reason, "slowdown");
  EXPECT_GE(sw[0].t, 30.0);
  EXPECT_LE(sw[0].t, 35.0);  // the 3 s hold plus the 1 s window's lag
  double on_hierarchical = 0, last = sw[0].t;
  bool hier = true;
  for (size_t i = 1; i < sw.size(); ++i) {
    const double until = std::min(sw[i].t, 80.0);
    if (hier && until > last) on_hierarchical += until - last;
    last = sw[i].t;
    hier = sw[i].to.topology == Topology::kHierarchical;
    if (sw[i].t < 80) {
      // While the uplink is slow: only re-probes of the ring, each climbing back.
      if (sw[i].to.topology == Topology::kRing) {
        EXPECT_EQ(sw[i].reason, "reprobe") << "at " << sw[i].t;
      }
      EXPECT_NE(sw[i].to.topology, Topology::kHalvingDoubling);
    }
  }
  if (hier && last < 80) on_hierarchical += 80 - last;
  EXPECT_GE(on_hierarchical, 0.7 * (80 - sw[0].t)) << "hierarchical for the slow uplink's phase";
  EXPECT_EQ(sw.back().to.topology, Topology::kRing);
  EXPECT_GE(sw.back().t, 80.0);
  EXPECT_LE(sw.back().t, 80.0 + 32.5);
}

// A slowdown probe is judged against the slow level, not a smoothed one that still carries the
// calm steps before it: netlab's uplink phase sent a hierarchical running 342 samples/s back to a
// ring that ran 290-304, because the ring's "before" read 345.
TEST(RulesPolicy, ASlowdownProbeIsJudgedAgainstTheSlowLevelNotTheCalmBeforeIt) {
  RulesPolicy p;
  auto sw = runOnArm(p, 60, [](double t, const Arm& a) {
    JobState j = linkModel(t >= 20 ? Phase::kUplinkHidden : Phase::kClear, a);
    if (t >= 20) j.samples_per_s_per_rank = a.topology == Topology::kRing ? 300 : 330;
    return j;
  });
  ASSERT_GE(sw.size(), 1u);
  EXPECT_EQ(sw[0].reason, "slowdown");
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  for (const Switch& s : sw) EXPECT_NE(s.reason, "probe_slower") << "at " << s.t;
}

// Re-probes are a bet whose stake is a failed probe's time and whose win is what the lower rung
// ran faster when calm. Hierarchical nearly as fast as the calm ring: the ring is re-probed only
// after the longest wait; far slower: after the shortest, as before.
TEST(RulesPolicy, TheLowerRungIsReprobedOnceWhatItCanWinBackRepaysAFailedProbe) {
  const auto reprobes = [](double hierarchical_per_rank) {
    RulesPolicy p;
    std::vector<Switch> out;
    for (const Switch& s : runOnArm(p, 100, [&](double t, const Arm&a) {
           JobState j = linkModel(t >= 20 ? Phase::kIntraHostCongested : Phase::kClear, a);
           if (a.topology == Topology::kHierarchical)
             j.samples_per_s_per_rank = hierarchical_per_rank;
           return j;
         }))
      if (s.reason == "reprobe" || s.to.topology == Topology::kHierarchical) out.push_back(s);
    return out;
  };
  // 500 calm on the ring against 480 on hierarchical: +4%, which repays a 1.5 s probe after 36 s.
  const auto close = reprobes(480);
  ASSERT_GE(close.size(), 2u);
  EXPECT_EQ(close[0].to.topology, Topology::kHierarchical);
  EXPECT_EQ(close[1].reason, "reprobe");
  EXPECT_GE(close[1].t - close[0].t, 32.0) << "max_reprobe_after";
  EXPECT_LE(close[1].t - close[0].t, 33.0);
  // 500 against 250: +100%, repaid after 1.5 s; the 8 s floor decides.
  const auto far = reprobes(250);
  ASSERT_GE(far.size(), 2u);
  EXPECT_EQ(far[1].reason, "reprobe");
  EXPECT_GE(far[1].t - far[0].t, 8.0);
  EXPECT_LE(far[1].t - far[0].t, 9.0);
}

// The same slowdown where the next rung is no faster: one probe, back within seconds, and the
// next only after the backed-off wait (20 s, then 40, 80): a budget, not a flap.
TEST(RulesPolicy, ASlowdownProbeThatIsNoFasterStepsBackAndBacksOff) {
  RulesPolicy p;
  auto sw = runOnArm(p, 130, [](double t, const Arm& a) {
    JobState j = linkModel(t >= 20 ? Phase::kUplinkHidden : Phase::kClear, a);
    if (a.topology != Topology::kRing && t >= 20) j.samples_per_s_per_rank = 240;
    return j;
  });
  std::vector<double> probes;
  for (size_t i = 0; i < sw.size(); ++i) {
    if (sw[i].reason != "slowdown") continue;
    probes.push_back(sw[i].t);
    ASSERT_LT(i + 1, sw.size());
    EXPECT_EQ(sw[i + 1].reason, "probe_slower");
    EXPECT_EQ(sw[i + 1].to.topology, Topology::kRing);
    EXPECT_LE(sw[i + 1].t - sw[i].t, 4.6) << "settle + measure";
  }
  ASSERT_GE(probes.size(), 1u);
  EXPECT_LE(probes.size(), 4u);
  for (size_t i = 1; i < probes.size(); ++i) EXPECT_GE(probes[i] - probes[i - 1], 20.0);
  EXPECT_EQ(sw.back().to.topology, Topology::kRing);
}

// Throughput down because the CPU is slower (the allreduce's share falls: compute grows): not a
// communication problem, no probe.
TEST(RulesPolicy, ACpuSlowdownIsNoReasonToChangeTopology) {
  RulesPolicy p;
  auto sw = runOnArm(p, 60, [](double t, const Arm& a) {
    JobState j = linkModel(Phase::kClear, a);
    if (t >= 20) {
      j.samples_per_s_per_rank = 250;
      j.step_s = 0.4;  // the allreduce's 0.1 s is now a quarter of the step
    }
    return j;
  });
  EXPECT_TRUE(sw.empty()) << sw[0].reason << " at " << sw[0].t;
}

// A busy host where hierarchical outruns the ring with nothing congested (measured in
// controller_e2e_test's setup: 1034 vs 364-423 samples/s): a probe of the ring finds its links
// clear but its throughput lower, and climbs back (probe_slower) rather than staying.
TEST(RulesPolicy, AProbeThatRunsSlowerClimbsBackWhateverTheLinksSay) {
  RulesPolicy p;
  // (Hierarchical outruns the ring's calm level here, so the ring is re-probed only every 32 s.)
  auto sw = runOnArm(p, 90, [](double t, const Arm& a) {
    JobState j = linkModel(t >= 10 && t < 30 ? Phase::kIntraHostCongested : Phase::kClear, a);
    if (a.topology != Topology::kRing) j.samples_per_s_per_rank = 900;
    return j;
  });
  bool slower = false;
  for (const Switch& s : sw)
    if (s.reason == "probe_slower") {
      slower = true;
      EXPECT_EQ(s.to.topology, Topology::kHierarchical);
    }
  EXPECT_TRUE(slower);
  ASSERT_FALSE(sw.empty());
  EXPECT_EQ(sw.back().to.topology, Topology::kHierarchical);
}

// Clear links for a minute: nothing to do.
TEST(RulesPolicy, SteadyClearLinksMakeNoDecision) {
  RulesPolicy p;
  EXPECT_TRUE(runPhases(p, 60, [](double) { return Phase::kClear; }).empty());
}

TEST(RulesPolicy, SwitchesUnderCongestionAndComesBackAfterIt) {
  RulesPolicy p;
  auto sw = run(p, 120, [](double t) { return t >= 20 && t < 60 ? congested() : clear(); });
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_EQ(sw[0].reason, "congestion");
  EXPECT_GE(sw[0].t, 20.0);
  EXPECT_LE(sw[0].t, 21.0);  // two consecutive congested steps
  EXPECT_EQ(sw[1].to.topology, Topology::kRing);
  EXPECT_EQ(sw[1].reason, "clear");
  EXPECT_GE(sw[1].t, 70.0);  // the 10 s cooldown of all-clear
  EXPECT_LE(sw[1].t, 71.0);
}

// Hierarchical's bus bandwidth never reaches the ring's (measured in the demo: 221 vs 490
// samples/s after the congestion lifted): the all-clear compares it with its own best.
TEST(RulesPolicy, StepsBackDownWhenTheHigherRungNeverReachesTheRingsBandwidth) {
  RulesPolicy q;
  auto sw2 = runOnArm(q, 120, [](double t, const Arm& a) {
    JobState j = t >= 20 && t < 60 ? congested() : clear();
    j.busbw = a.topology == Topology::kHierarchical ? 0.45e9 : (t >= 20 && t < 60 ? 0.3e9 : 1e9);
    return j;
  });
  ASSERT_EQ(sw2.size(), 2u);
  EXPECT_EQ(sw2[0].to.topology, Topology::kHierarchical);
  EXPECT_EQ(sw2[1].to.topology, Topology::kRing);
  EXPECT_EQ(sw2[1].reason, "clear");
  EXPECT_GE(sw2[1].t, 70.0);
  EXPECT_LE(sw2[1].t, 76.0);
}

// Hierarchical hides the congestion (its leaders' links look clear): each step down that has
// to climb back doubles the cooldown, so the ring is retried ever more rarely.
TEST(RulesPolicy, FailedStepsDownBackOff) {
  RulesPolicy p;
  std::vector<double> descents;
  for (const Switch& sw : runOnArm(p, 200, [](double t, const Arm&a) {
         const bool congested_link = t >= 10;  // never lifts
         return congested_link && a.topology == Topology::kRing ? congested() : clear();
       }))
    if (sw.to.topology == Topology::kRing) descents.push_back(sw.t);
  ASSERT_GE(descents.size(), 3u);
  // Gaps between retries grow: 10 s cooldown, then 20, 40, 80 (plus dwell and detection).
  for (size_t i = 2; i < descents.size(); ++i)
    EXPECT_GT(descents[i] - descents[i - 1], 1.5 * (descents[i - 1] - descents[i - 2]) - 2.0)
        << "retry " << i;
  EXPECT_LE(descents.size(), 5u);
}

TEST(RulesPolicy, SevereCongestionClimbsToHalvingDoublingAndDescendsRungByRung) {
  RulesPolicy p;
  auto sw = run(p, 100, [](double t) {
    if (t >= 10 && t < 40) return severe();
    if (t >= 40 && t < 60) return congested();
    return clear();
  });
  ASSERT_EQ(sw.size(), 3u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHalvingDoubling);
  EXPECT_EQ(sw[0].reason, "severe_congestion");
  EXPECT_EQ(sw[1].to.topology, Topology::kHierarchical);  // not severe any more, for the cooldown
  EXPECT_GE(sw[1].t, 50.0);
  EXPECT_EQ(sw[2].to.topology, Topology::kRing);
  EXPECT_GE(sw[2].t, 70.0);
}

TEST(RulesPolicy, NoFlappingOnNoisySteadyStreams) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> qd(4e6, 12e6), jit(3e-3, 11.5e-3);
  // Noise around the low thresholds, never above the high ones: 60 s, no switch.
  RulesPolicy quiet;
  auto none = run(quiet, 60, [&](double) {
    JobState j = clear();
    j.queued_bytes_p99 = qd(rng);
    j.rtt_p99 = j.rtt_p50 + jit(rng);
    return j;
  });
  EXPECT_TRUE(none.empty()) << "switched to " << armName(none[0].to) << " at " << none[0].t;

  // Steady congestion whose signals straddle the high threshold, throughput down after the first
  // 5 s: one switch up, none back.
  std::uniform_real_distribution<double> busy(6e-3, 40e-3);
  RulesPolicy loaded;
  auto one = run(loaded, 60, [&](double t) {
    JobState j = clear();
    j.rtt_p99 = j.rtt_p50 + busy(rng);
    if (t >= 5) j.samples_per_s_per_rank = 300;
    return j;
  });
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].to.topology, Topology::kHierarchical);

  // The same signals at unchanged throughput (RTT raised by CPU load, not by the network): no
  // switch.
  RulesPolicy busy_cpu;
  auto kept = run(busy_cpu, 60, [&](double) {
    JobState j = clear();
    j.rtt_p99 = j.rtt_p50 + busy(rng);
    return j;
  });
  EXPECT_TRUE(kept.empty()) << "switched to " << armName(kept[0].to) << " at " << kept[0].t;

  // Isolated single-step spikes never escalate (two consecutive steps needed).
  RulesPolicy spiky;
  int step = 0;
  auto spikes = run(spiky, 60, [&](double) { return (step++ % 3 == 0) ? congested() : clear(); });
  EXPECT_TRUE(spikes.empty());
}

// A topology-aware model of an RDMA job (--transport ibverbs: no TCP gradient traffic, the tcp
// probe absent) from the levels measured on numalab's rxe link (RulesConfig, docs/controller.md):
// loss events per packet 0-0.0154 clear on every rung, 0.03-0.086 in most windows with 20 ms of
// netem delay each way on the ring and on hierarchical (whose leaders cross the same link);
// halving-doubling 0.007-0.017 with 10 ms. Completion medians overlapped clear and delayed (the
// policy leaves them off), so the model gives every phase the same. Throughput: the ring fastest
// when clear, every rung slower when delayed.
enum class RdmaPhase { kClear, kDelayed };
JobState rdmaModel(RdmaPhase phase, const Arm& arm) {
  JobState j;
  j.has_transport = false;
  const bool delayed = phase == RdmaPhase::kDelayed;
  j.rdma.packets_per_s = 3000;
  j.rdma.completion_p50 = 0.3;
  j.rdma.completion_p99 = 0.9;
  double loss_ratio = 0.002;
  switch (arm.topology) {
    case Topology::kRing:
      j.samples_per_s_per_rank = delayed ? 150 : 500;
      loss_ratio = delayed ? 0.05 : 0.002;
      break;
    case Topology::kHierarchical:
      j.samples_per_s_per_rank = delayed ? 250 : 450;
      loss_ratio = delayed ? 0.05 : 0.004;
      break;
    default:
      j.samples_per_s_per_rank = delayed ? 220 : 300;
      loss_ratio = delayed ? 0.015 : 0.01;
      break;
  }
  j.rdma.loss_per_s = loss_ratio * j.rdma.packets_per_s;
  return j;
}

std::vector<Switch> runRdma(RulesPolicy& p, double seconds,
                            const std::function<RdmaPhase(double)>& phase) {
  return runOnArm(p, seconds, [&](double t, const Arm& a) { return rdmaModel(phase(t), a); });
}

// A delayed RDMA link moves the job up like a congested TCP link does, and the link's recovery,
// seen by hierarchical's leaders on the same link, brings it back.
TEST(RulesPolicy, RdmaLossMovesUpAndItsAllClearBack) {
  RulesPolicy p;
  auto sw = runRdma(
      p, 110, [](double t) { return t >= 30 && t < 70 ? RdmaPhase::kDelayed : RdmaPhase::kClear; });
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_EQ(sw[0].reason, "congestion");
  EXPECT_GE(sw[0].t, 30.0);
  EXPECT_LE(sw[0].t, 30.5);  // 0.3x calm: decisive on its first step
  // Back once the rdma class has not read congested up there for rdma_clear_hold (6 s after its
  // last congested step, 69.5 s): an A/B trial, kept (the ring is faster).
  EXPECT_EQ(sw[1].to.topology, Topology::kRing);
  EXPECT_TRUE(sw[1].reason == "reprobe" || sw[1].reason == "clear") << sw[1].reason;
  EXPECT_GE(sw[1].t, 75.5);
  EXPECT_LE(sw[1].t, 76.5);
}

// The decision names the RDMA class and the figure that crossed its threshold.
TEST(RulesPolicy, RdmaDecisionSaysWhatItSaw) {
  RulesPolicy p;
  FeatureExtractor ex("j");
  const Arm ring{};
  Decision d;
  int64_t ns = 0;
  for (; ns < 20'000'000'000; ns += kStepNs) {
    d = p.decide(ex.update(snapshotsOf(rdmaModel(RdmaPhase::kClear, ring)), ns), ring, ns);
    ASSERT_FALSE(d.change) << d.detail;
  }
  d = p.decide(ex.update(snapshotsOf(rdmaModel(RdmaPhase::kDelayed, ring)), ns), ring, ns);
  ASSERT_TRUE(d.change);
  EXPECT_EQ(d.detail.rfind("rdma: loss 0.0500 per packet >= 0.0300", 0), 0u) << d.detail;
}

// With a completion-p99 threshold (off by default: uncalibrated on TCG; a real NIC's calibration
// sets it), a delayed link whose loss stays clear moves the job up on the tail latency alone,
// naming it, and the p99 back under its low threshold lets the job return. Left off, the same run
// changes nothing.
TEST(RulesPolicy, RdmaCompletionTailMovesTheJobWhenCalibrated) {
  const auto model = [](double t, const Arm& a) {
    const bool delayed = t >= 30 && t < 70;
    JobState j = rdmaModel(delayed ? RdmaPhase::kDelayed : RdmaPhase::kClear, a);
    j.rdma.loss_per_s = 0.002 * j.rdma.packets_per_s;  // loss never crosses its thresholds
    j.rdma.completion_p50 = 0.001;
    j.rdma.completion_p99 = delayed && a.topology == Topology::kRing ? 0.040 : 0.002;
    return j;
  };
  RulesConfig c;
  c.rdma_completion_p99_high_s = 0.010;
  c.rdma_completion_p99_low_s = 0.004;
  RulesPolicy p(c);
  auto sw = runOnArm(p, 110, model);
  ASSERT_GE(sw.size(), 1u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_EQ(sw[0].reason, "congestion");
  EXPECT_GE(sw[0].t, 30.0);
  EXPECT_LE(sw[0].t, 32.0);

  FeatureExtractor ex("j");
  const Arm ring{};
  RulesPolicy named(c);
  Decision d;
  int64_t ns = 0;
  for (; ns < 20'000'000'000; ns += kStepNs) {
    d = named.decide(ex.update(snapshotsOf(model(0, ring)), ns), ring, ns);
    ASSERT_FALSE(d.change) << d.detail;
  }
  for (int i = 0; i < 10 && !d.change; ++i, ns += kStepNs)
    d = named.decide(ex.update(snapshotsOf(model(40, ring)), ns), ring, ns);
  ASSERT_TRUE(d.change);
  EXPECT_NE(d.detail.find("rdma: completion_p99="), std::string::npos) << d.detail;

  RulesPolicy off;  // the default: p99 off
  auto none = runOnArm(off, 110, model);
  EXPECT_TRUE(none.empty()) << "switched to " << armName(none[0].to) << " at " << none[0].t;
}

// Loss up with unchanged throughput is not congestion; noise under the high threshold changes
// nothing; and neither does a completion latency anywhere in its measured range (off).
TEST(RulesPolicy, RdmaSignalsWithoutAThroughputCostOrUnderTheThresholdsChangeNothing) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> clear_loss(0, 0.027), p50(0.016, 1.84);
  RulesPolicy quiet;
  auto none = runOnArm(quiet, 60, [&](double, const Arm& a) {
    JobState j = rdmaModel(RdmaPhase::kClear, a);
    j.rdma.loss_per_s = clear_loss(rng) * j.rdma.packets_per_s;
    j.rdma.completion_p50 = p50(rng);
    j.rdma.completion_p99 = 2;
    return j;
  });
  EXPECT_TRUE(none.empty()) << "switched to " << armName(none[0].to) << " at " << none[0].t;

  RulesPolicy busy_cpu;
  auto kept = runOnArm(busy_cpu, 60, [&](double t, const Arm& a) {
    JobState j = rdmaModel(RdmaPhase::kClear, a);
    if (t >= 20) j.rdma.loss_per_s = 0.05 * j.rdma.packets_per_s;
    return j;
  });
  EXPECT_TRUE(kept.empty()) << "switched to " << armName(kept[0].to) << " at " << kept[0].t;
}

// The link stays delayed: hierarchical's leaders still see it congested, so the job stays up,
// with no re-probe of the ring (a TCP class that hierarchical cannot judge would be re-probed).
TEST(RulesPolicy, RdmaCongestionTheHigherRungStillSeesKeepsTheJobUp) {
  RulesPolicy p;
  auto sw =
      runRdma(p, 90, [](double t) { return t >= 10 ? RdmaPhase::kDelayed : RdmaPhase::kClear; });
  ASSERT_EQ(sw.size(), 1u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_LE(sw[0].t, 10.5);
}

// A TCP link class and RDMA side by side: the worse decides, and the way back is judged on the
// class that caused the step up (here RDMA, while the TCP links stay clear throughout).
TEST(RulesPolicy, RdmaAndTcpLinkClassesTheWorseDecides) {
  RulesPolicy p;
  auto sw = runOnArm(p, 80, [](double t, const Arm& a) {
    JobState j = rdmaModel(t >= 20 && t < 50 ? RdmaPhase::kDelayed : RdmaPhase::kClear, a);
    j.has_transport = true;
    j.same_host = {0.2e-3, 1.5e-3, 6e6};
    return j;
  });
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_LE(sw[0].t, 20.5);
  EXPECT_EQ(sw[1].to.topology, Topology::kRing);
  EXPECT_TRUE(sw[1].reason == "reprobe" || sw[1].reason == "clear") << sw[1].reason;
  EXPECT_GE(sw[1].t, 55.5);
  EXPECT_LE(sw[1].t, 56.5);
}

// After the delay lifts, the lower rung may still lose the throughput A/B (in the guest the ring
// ran at 177-256 samples/s against hierarchical's 295-670 once the link was clear): each failed
// step down doubles the next RDMA hold, so the job does not flap every few seconds.
TEST(RulesPolicy, FailedRdmaDescentsBackOff) {
  RulesPolicy p;
  auto sw = runOnArm(p, 150, [](double t, const Arm& a) {
    JobState j = rdmaModel(t >= 10 && t < 30 ? RdmaPhase::kDelayed : RdmaPhase::kClear, a);
    if (t >= 30 && a.topology == Topology::kRing) j.samples_per_s_per_rank = 250;
    return j;
  });
  std::vector<double> descents;
  for (const Switch& s : sw)
    if (s.to.topology == Topology::kRing) descents.push_back(s.t);
  ASSERT_GE(descents.size(), 3u);
  std::string gaps;
  for (size_t i = 1; i < descents.size(); ++i)
    gaps += std::to_string(descents[i] - descents[i - 1]) + " ";
  // Hold 6 s, then 12, 24 (the cap, x4), each plus the failed probe's 2-4 s.
  EXPECT_GE(descents[2] - descents[1], 1.5 * (descents[1] - descents[0])) << gaps;
  for (size_t i = 3; i < descents.size(); ++i)
    EXPECT_GE(descents[i] - descents[i - 1], 24.0) << gaps;
  EXPECT_LE(descents.size(), 6u) << gaps;
  EXPECT_EQ(sw.back().to.topology, Topology::kHierarchical);
}

// The loss figure comes in bursts: in an adaptive guest run hierarchical read under the low
// threshold for 2 s while the delay was still on, and the old 2 s hold stepped down on it. A lull
// shorter than rdma_clear_hold keeps the job up.
TEST(RulesPolicy, AShortLullInRdmaLossIsNoAllClear) {
  auto lulls = [](double t, const Arm& a) {
    JobState j = rdmaModel(t >= 10 ? RdmaPhase::kDelayed : RdmaPhase::kClear, a);
    const bool lull = (t >= 20 && t < 23) || (t >= 35 && t < 39);
    if (lull) j.rdma.loss_per_s = 0.0017 * j.rdma.packets_per_s;
    return j;
  };
  RulesPolicy p;
  auto sw = runOnArm(p, 60, lulls);
  ASSERT_EQ(sw.size(), 1u) << sw[1].reason << " at " << sw[1].t;
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  // With the TCP classes' 2 s hold the same lulls step down (and the ring climbs back).
  RulesConfig short_hold;
  short_hold.rdma_clear_hold = std::chrono::seconds(2);
  RulesPolicy q(short_hold);
  auto flapping = runOnArm(q, 60, lulls);
  ASSERT_GE(flapping.size(), 2u);
  EXPECT_EQ(flapping[1].to.topology, Topology::kRing);
  EXPECT_GE(flapping[1].t, 20.0);
}

int levelRank(Topology t) {
  return t == Topology::kRing ? 0 : t == Topology::kHierarchical ? 1 : 2;
}

TEST(RulesPolicy, DwellAndCooldownAreRespected) {
  RulesConfig c;
  c.min_dwell = std::chrono::seconds(8);
  c.cooldown = std::chrono::seconds(6);
  RulesPolicy p(c);
  // Congested, then severe right after the first switch, then clear, then congested again
  // briefly, then clear: every switch at least min_dwell after the previous one, and every
  // descent after `cooldown` of all-clear.
  auto state = [](double t) {
    if (t < 2) return clear();
    if (t < 4) return congested();
    if (t < 20) return severe();
    if (t < 30) return clear();
    if (t < 31) return congested();
    return clear();
  };
  auto sw = run(p, 90, state);
  ASSERT_GE(sw.size(), 3u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_EQ(sw[1].to.topology, Topology::kHalvingDoubling);
  EXPECT_GE(sw[1].t - sw[0].t, 8.0);
  // A move up right after a move down (a failed descent) waits escalate_dwell (1 s); every other
  // move min_dwell.
  for (size_t i = 1; i < sw.size(); ++i) {
    const bool climbs_back = levelRank(sw[i].to.topology) > levelRank(sw[i - 1].to.topology) &&
                             sw[i - 1].reason == "clear";
    EXPECT_GE(sw[i].t - sw[i - 1].t, (climbs_back ? 1.0 : 8.0) - 1e-9) << "switch " << i;
  }
  for (const Switch& s : sw) {
    if (s.reason != "clear") continue;
    // The signal must have been clear (or for the top rung, not severe) for the whole cooldown.
    EXPECT_GE(s.t, 20.0 + 6.0);
  }
  EXPECT_EQ(sw.back().to.topology, Topology::kRing);
}

// Drives the policy on clear links, one step per 500 ms, with `extra` adding the series (and
// changing the job's state) as the current pinning makes them; decisions apply at once.
std::vector<Decision> pinRun(
    double seconds,
    const std::function<void(std::vector<SeriesSnapshot>&, JobState&, const Arm&)>& extra) {
  RulesPolicy p;
  Arm cur;
  FeatureExtractor ex("j");
  std::vector<Decision> ds;
  for (int64_t ns = 0; ns <= int64_t(seconds * 1e9); ns += kStepNs) {
    JobState j = clear();
    j.pinning = int(cur.pinning);
    std::vector<SeriesSnapshot> s;
    extra(s, j, cur);
    std::vector<SeriesSnapshot> all = snapshotsOf(j);
    all.insert(all.end(), s.begin(), s.end());
    Decision d = p.decide(ex.update(all, ns), cur, ns);
    if (d.change) {
      ds.push_back(d);
      cur = d.to;
    }
  }
  return ds;
}

// Pinning is an A/B trial: a move that neither speeds the job up nor calms its signal is undone
// and not retried for pin_retry_after; one that helps stays. Migrations are high on an unpinned
// job; the factors say what pinning does to throughput and to the migrations.
// cpu+llc migrations count only while they cost throughput: the job runs calm for 4 s (40
// migrations/s), then migrates 300/s at 0.8x its calm samples/s.
std::vector<Decision> pinTrial(double seconds, double throughput_factor, double migration_factor) {
  double t = -0.5;
  return pinRun(seconds, [&](std::vector<SeriesSnapshot>& s, JobState& j, const Arm& cur) {
    t += 0.5;
    const bool pinned = cur.pinning != PinMode::kNone;
    double rate = 40;
    if (t >= 4) {
      j.samples_per_s_per_rank *= 0.8 * (pinned ? throughput_factor : 1);
      rate = pinned ? 300 * migration_factor : 300;
    }
    s.push_back(
        counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "cpu"}}, rate));
  });
}

TEST(RulesPolicy, PinningThatDoesNotHelpIsUndoneAndNotRetried) {
  std::vector<Decision> ds = pinTrial(100, 1.0, 1.0);
  ASSERT_EQ(ds.size(), 2u);
  EXPECT_EQ(ds[0].to.pinning, PinMode::kCompact);
  EXPECT_EQ(ds[1].to.pinning, PinMode::kNone);
  EXPECT_EQ(ds[1].reason, "pin_undone");
  // A pinning that costs throughput is undone even though it calms the migrations.
  std::vector<Decision> costly = pinTrial(30, 0.95, 0.1);
  ASSERT_EQ(costly.size(), 2u);
  EXPECT_EQ(costly[1].reason, "pin_undone");
}

// A pinning that costs 10% or more is undone 1 s after the settling time (pin_settle +
// pin_early_measure), not after the whole measure: the clear-phase trials on netlab lost 25-31%.
TEST(RulesPolicy, ACostlyPinningIsUndoneEarly) {
  auto undoneAfter = [](double throughput_factor) {
    RulesPolicy p;
    Arm cur;
    FeatureExtractor ex("j");
    double pinned_at = -1;
    for (int i = 0; i <= 60; ++i) {
      const double t = i * 0.5;
      JobState j = clear();
      j.pinning = int(cur.pinning);
      double rate = 40;
      if (t >= 4) {
        j.samples_per_s_per_rank *= 0.8 * (cur.pinning != PinMode::kNone ? throughput_factor : 1);
        rate = cur.pinning != PinMode::kNone ? 0 : 300;
      }
      std::vector<SeriesSnapshot> s = snapshotsOf(j);
      s.push_back(
          counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "cpu"}}, rate));
      Decision d = p.decide(ex.update(s, i * kStepNs), cur, i * kStepNs);
      if (!d.change) continue;
      if (d.to.pinning != PinMode::kNone) {
        pinned_at = t;
      } else {
        EXPECT_EQ(d.reason, "pin_undone");
        return t - pinned_at;
      }
      cur = d.to;
    }
    return -1.0;
  };
  const double costly = undoneAfter(0.7);  // -30%
  EXPECT_GE(costly, 3.0);
  EXPECT_LE(costly, 3.5);
  // -5%, with the migrations gone: the whole measure decides (pin_loss 3%).
  const double mild = undoneAfter(0.95);
  EXPECT_GE(mild, 6.0);
  EXPECT_LE(mild, 6.5);
}

// One noisy first reading is no early verdict (the numalab_guest flake: a numa pin that was
// cutting remote faults undone on its first second): the early undo needs two consecutive
// readings past the bar, counted from the step the ranks report the pinning, and the bar widens
// with the readings' spread before the move. Otherwise the whole measure decides.
TEST(RulesPolicy, OneNoisyReadingAfterAPinningMoveIsNoEarlyVerdict) {
  // factor(k): the pinned job's samples/s factor on its k-th step after the move was applied.
  // apply_delay: steps between the decision and the ranks reporting the pinning.
  auto trial = [](const std::function<double(int)>& factor, int apply_delay, double noise) {
    RulesPolicy p;
    Arm cur, reported;
    FeatureExtractor ex("j");
    std::mt19937 rng(3);
    std::uniform_real_distribution<double> u(-noise, noise);
    double pinned_at = -1;
    int pending = -1, pinned_steps = 0;
    for (int i = 0; i <= 80; ++i) {
      const double t = i * 0.5;
      if (pending >= 0 && --pending < 0) reported = cur;
      JobState j = clear();
      j.pinning = int(reported.pinning);
      const bool pinned = reported.pinning != PinMode::kNone;
      double rate = 40;
      if (t >= 4) {
        j.samples_per_s_per_rank *= 0.8 * (pinned ? factor(pinned_steps++) : 1 + u(rng));
        rate = pinned ? 0 : 300;
      }
      std::vector<SeriesSnapshot> s = snapshotsOf(j);
      s.push_back(
          counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "cpu"}}, rate));
      Decision d = p.decide(ex.update(s, i * kStepNs), reported, i * kStepNs);
      if (!d.change) continue;
      if (d.to.pinning != PinMode::kNone) {
        pinned_at = t;
        cur = d.to;
        pending = apply_delay;
      } else {
        EXPECT_EQ(d.reason, "pin_undone");
        return t - pinned_at;
      }
    }
    return -1.0;
  };
  // The move's own transient: its first reading after settling 40% down, then as before. No
  // early undo (the mean of the first readings was 13% down); the whole measure judges it.
  const double dip = trial([](int k) { return k == 4 ? 0.6 : 1.0; }, 0, 0);
  EXPECT_TRUE(dip < 0 || dip >= 6.0) << dip;
  // Applied two steps (1 s) after the decision, its first steps slow: the verdict counts from
  // the application, and a pinning that runs as fast after that is kept.
  const auto slowStart = [](int k) { return k < 3 ? 0.6 : 1.0; };
  EXPECT_LT(trial(slowStart, 2, 0), 0);
  // A real cost still ends early: two readings 30% down, 3-3.5 s after the application.
  const double costly = trial([](int) { return 0.7; }, 2, 0);
  EXPECT_GE(costly, 1.0 + 3.0);
  EXPECT_LE(costly, 1.0 + 3.5);
  // Readings +-12% apart before the move: a steady 15% loss is within twice that spread, so the
  // whole measure (pin_loss 3%) undoes it instead.
  const double noisy = trial([](int) { return 0.85; }, 0, 0.12);
  EXPECT_GE(noisy, 6.0);
  EXPECT_LE(noisy, 6.5);
}

// Measured on netlab: clear phases held cpu+llc migrations at 180-192/s and other builds pushed
// them to 224-478/s with the job at its calm throughput (compact then cost 8-31%), while two busy
// loops on both cores halved samples/s and brought migrations down to 10-50/s. Migrations alone
// never pin; with samples/s at 0.8x calm they do, once.
TEST(RulesPolicy, CpuMigrationsPinOnlyWhileTheyCostThroughput) {
  auto pinsAt = [](double migrations, double throughput) {
    RulesPolicy p;
    Arm cur;
    FeatureExtractor ex("j");
    std::mt19937 rng(5);
    std::uniform_real_distribution<double> u(-0.08, 0.08);
    for (int i = 0; i <= 120; ++i) {  // 60 s
      const double t = i * 0.5;
      JobState j = clear();
      j.samples_per_s_per_rank *= (t >= 4 ? throughput : 1) * (1 + u(rng));
      std::vector<SeriesSnapshot> s = snapshotsOf(j);
      s.push_back(counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "cpu"}},
                          t >= 4 ? migrations : 40));
      Decision d = p.decide(ex.update(s, i * kStepNs), cur, i * kStepNs);
      if (d.change) return d.to.pinning == PinMode::kCompact ? t : -2.0;
    }
    return -1.0;
  };
  EXPECT_LT(pinsAt(190, 1.0), 0);       // a quiet host's clear phase
  EXPECT_LT(pinsAt(478, 1.0), 0);       // other builds running, the job unharmed
  EXPECT_LT(pinsAt(30, 0.5), 0);        // real CPU contention: fewer migrations
  const double at = pinsAt(300, 0.75);  // migrations that cost throughput
  EXPECT_GE(at, 9.0);                   // 4 s calm + pin_sustain
  EXPECT_LE(at, 10.0);
}

TEST(RulesPolicy, PinningThatHelpsIsKept) {
  std::vector<Decision> faster = pinTrial(60, 1.1, 1.0);
  ASSERT_EQ(faster.size(), 1u);
  EXPECT_EQ(faster[0].to.pinning, PinMode::kCompact);
  std::vector<Decision> calmer = pinTrial(60, 1.0, 0.2);
  ASSERT_EQ(calmer.size(), 1u);
}

TEST(RulesPolicy, PinsFromMigrationAndCrossNodeSignals) {
  {
    RulesPolicy p;
    auto sw = run(p, 5, [](double) {
      JobState j = clear();
      return j;
    });
    EXPECT_TRUE(sw.empty());
  }
  RulesPolicy p;
  Arm cur;
  FeatureExtractor ex("j");
  std::vector<Decision> ds;
  // 8 s: the signal must hold for pin_sustain (5 s) first.
  for (int i = 0; i < 16; ++i) {
    std::vector<SeriesSnapshot> s = snapshotsOf(clear());
    s.push_back(
        counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "node"}}, 5));
    Decision d = p.decide(ex.update(s, i * kStepNs), cur, i * kStepNs);
    if (d.change) {
      ds.push_back(d);
      cur = d.to;
    }
  }
  ASSERT_EQ(ds.size(), 1u);
  EXPECT_EQ(ds[0].to.pinning, PinMode::kNuma);
  EXPECT_EQ(ds[0].to.topology, Topology::kRing);
  EXPECT_EQ(ds[0].reason, "cross_node");

  RulesPolicy q;
  Arm cur2;
  Decision last;
  for (int i = 0; i < 24; ++i) {
    // 2 s calm, then cpu migrations that cost throughput.
    JobState j = clear();
    if (i >= 4) j.samples_per_s_per_rank *= 0.8;
    std::vector<SeriesSnapshot> s = snapshotsOf(j);
    s.push_back(counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "cpu"}},
                        i >= 4 ? 300 : 40));
    Decision d = q.decide(ex.update(s, i * kStepNs), cur2, i * kStepNs);
    if (d.change) last = d;
  }
  EXPECT_EQ(last.to.pinning, PinMode::kCompact);
  EXPECT_EQ(last.reason, "migrations");
}

// Memory on the wrong node (a job started under another node's memory policy): no task moves
// at all, but most NUMA hinting faults are remote. The move to numa is judged on cross-node
// events, remote faults included, so one that brings the memory home is kept even when
// throughput stays flat; one that leaves the faults remote is undone.
std::vector<Decision> misplacedMemory(double seconds, double remote_factor_pinned) {
  return pinRun(seconds, [&](std::vector<SeriesSnapshot>& s, JobState&, const Arm& cur) {
    const bool numa = cur.pinning == PinMode::kNuma;
    for (int r = 0; r < 2; ++r) {
      auto l = jr("j", r);
      l.push_back({"locality", "remote"});
      s.push_back(counter("bpftrain_numa_hint_faults", l, numa ? 400 * remote_factor_pinned : 400));
      l.back().second = "local";
      s.push_back(counter("bpftrain_numa_hint_faults", l, numa ? 400 : 100));
    }
  });
}

TEST(RulesPolicy, MisplacedMemoryPinsNumaAndKeepsItWhenRemoteFaultsFall) {
  std::vector<Decision> home = misplacedMemory(60, 0.05);
  ASSERT_EQ(home.size(), 1u);
  EXPECT_EQ(home[0].to.pinning, PinMode::kNuma);
  EXPECT_EQ(home[0].reason, "cross_node");
  std::vector<Decision> stuck = misplacedMemory(30, 1.0);
  ASSERT_EQ(stuck.size(), 2u);
  EXPECT_EQ(stuck[1].to.pinning, PinMode::kNone);
  EXPECT_EQ(stuck[1].reason, "pin_undone");
}

// Pinning is one-way: cpu migrations that cross the threshold for a second or two at a time (a
// shared machine's load) never pin; ones that stay above the release level (0.75x) do, once
// they have held for pin_sustain.
TEST(RulesPolicy, PinningNeedsASustainedSignalWithHysteresis) {
  auto pins = [](const std::function<double(int)>& rate_at_step) {
    RulesPolicy p;
    Arm cur;
    FeatureExtractor ex("j");
    double at = -1;
    for (int i = 0; i < 64; ++i) {  // 2 s calm, then 30 s at 0.8x calm samples/s
      JobState j = clear();
      if (i >= 4) j.samples_per_s_per_rank *= 0.8;
      std::vector<SeriesSnapshot> s = snapshotsOf(j);
      s.push_back(counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "cpu"}},
                          i >= 4 ? rate_at_step(i - 4) : 40));
      Decision d = p.decide(ex.update(s, i * kStepNs), cur, i * kStepNs);
      if (d.change && d.to.pinning != PinMode::kNone && at < 0) {
        at = (i - 4) * 0.5;
        cur = d.to;
      }
    }
    return at;
  };
  // 3 s above (300/s), 1 s well below (100/s), repeated: never pins.
  EXPECT_LT(pins([](int i) { return i % 8 < 6 ? 300.0 : 100.0; }), 0);
  // Straddling the threshold but never under the release level (170/s): pins after >= 5 s.
  double at = pins([](int i) { return i % 4 < 2 ? 300.0 : 170.0; });
  EXPECT_GE(at, 5.0);
  EXPECT_LE(at, 6.0);
}

TEST(RulesPolicy, FallsBackToBusBandwidthWithoutTransportProbes) {
  RulesPolicy p;
  auto sw = run(p, 80, [](double t) {
    JobState j;
    j.has_transport = false;
    j.busbw = (t >= 20 && t < 40) ? 1.0e9 : 3.0e9;
    return j;
  });
  ASSERT_EQ(sw.size(), 2u);
  EXPECT_EQ(sw[0].to.topology, Topology::kHierarchical);
  EXPECT_LE(sw[0].t, 21.0);
  EXPECT_EQ(sw[1].to.topology, Topology::kRing);
  EXPECT_GE(sw[1].t, 50.0);
}

}  // namespace
}  // namespace bpftrain::collector::controller
