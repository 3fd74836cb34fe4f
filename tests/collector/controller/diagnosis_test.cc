// The diagnosis on the topology-aware signal model: which cause, which rank or link, and that a
// topology's own traffic pattern is not mistaken for congestion.
#include "collector/controller/diagnosis.h"

#include <gtest/gtest.h>

#include "tests/collector/controller/synthetic.h"

namespace bpftrain::collector::controller {
namespace {

using namespace testing;

// A diagnosis is reported once it held for two steps: feed the same features twice.
const Diagnosis& settle(Diagnoser& d, const Features& f) {
  d.update(f);
  return d.update(f);
}

Features featuresOf(const JobState& j) { return extractFeatures(snapshotsOf(j), "j", 0, nullptr); }

JobState ring() {
  JobState j;
  j.topology = int(Topology::kRing);
  j.same_host = {1.2e-3, 6e-3, 6e6};
  j.other_host = {1.3e-3, 6.5e-3, 6e6};
  return j;
}

TEST(Diagnosis, HealthyRingIsNone) {
  Diagnoser d;
  EXPECT_EQ(settle(d, featuresOf(ring())).cause, "none");
}

TEST(Diagnosis, NamesTheCongestedLinkClassAndPeer) {
  Diagnoser d;
  JobState j = ring();
  j.other_host = {9e-3, 33e-3, 7e6};
  const Diagnosis& g = settle(d, featuresOf(j));
  EXPECT_EQ(g.cause, "congested_link");
  EXPECT_EQ(g.link, "other_host:node1");
  EXPECT_NE(g.detail.find("RTT p50 9.0 ms"), std::string::npos) << g.detail;

  Diagnoser d2;
  JobState k = ring();
  k.same_host = {12e-3, 40e-3, 7e6};
  EXPECT_EQ(settle(d2, featuresOf(k)).link, "same_host");
}

// A healthy ring whose inter-host links carry 1e9 B/s (their p90 1.25e9, 10 Gbit/s, is the
// reading) for long enough that the features know that level; then `held()` feeds the changed
// state twice (the diagnosis's hold) and returns the diagnosis.
struct DeliveryRing {
  Diagnoser d;
  FeatureExtractor ex{"j"};
  JobState j = ring();
  int64_t t = 0;  // ns, a window step (500 ms) at a time
  DeliveryRing() {
    j.other_host.delivery = 1e9;
    for (int i = 0; i < 14; ++i)
      EXPECT_EQ(d.update(ex.update(snapshotsOf(j), next())).cause, "none");
  }
  int64_t next() { return t += 500'000'000; }
  const Diagnosis& held() {
    d.update(ex.update(snapshotsOf(j), next()));
    return d.update(ex.update(snapshotsOf(j), next()));
  }
  // The job climbed to hierarchical, whose leaders' inter-host RTT reads its own pattern: what
  // the diagnosis carries there.
  const Diagnosis& heldOnHierarchical() {
    j.topology = int(Topology::kHierarchical);
    j.same_host = {};
    j.other_host = {2e-3, 9e-3, 6e6};
    return held();
  }
};

// A throttled uplink whose RTT BBR keeps low: the delivery rate against its learned level names
// it, with the peer whose delivery rate fell.
TEST(Diagnosis, ADeliveryRateFarBelowItsLevelIsACongestedLink) {
  DeliveryRing r;
  r.j.other_host.delivery = 0.18e9;
  const Diagnosis& g = r.held();
  EXPECT_EQ(g.cause, "congested_link");
  EXPECT_EQ(g.link, "other_host:node1");
  EXPECT_NE(g.detail.find("delivery rate 1.80 Gbit/s, 0.18x its level"), std::string::npos)
      << g.detail;
}

// Lo throttled on the ring: the inter-host hop waits on the throttled same-host one and its RTT
// rises too (8.6 ms on netlab), but it still carries its usual rate; the same-host links are the
// diagnosis.
TEST(Diagnosis, AnInterHostLinkCarryingItsRateIsNotTheSlowOne) {
  DeliveryRing r;
  r.j.same_host = {6e-3, 26e-3, 7e6};
  r.j.other_host.rtt_p50 = 8.6e-3;
  r.j.other_host.delivery = 0.74e9;
  const Diagnosis& g = r.held();
  EXPECT_EQ(g.cause, "congested_link");
  EXPECT_EQ(g.link, "same_host") << g.detail;
}

// A failed re-probe of the ring under throttled lo: the ranks behind the throttled same-host
// hop answer late, so the inter-host RTT reads higher than the same-host one (the demo: 11 ms,
// delivery 0.31-0.54x its level) and the worst class is other_host. The controller climbed back
// on the same-host links: that is what is named and carried on hierarchical.
TEST(Diagnosis, TheLinkTheControllerMovedOnIsCarriedNotTheRingsWorstRtt) {
  DeliveryRing r;
  r.j.same_host = {6e-3, 26e-3, 7e6};
  r.j.other_host.rtt_p50 = 11e-3;
  r.j.other_host.delivery = 0.5e9;
  const Features& look = r.ex.update(snapshotsOf(r.j), r.next());
  Diagnoser held_alone;  // what the window steps alone would name: the worst RTT
  EXPECT_EQ(settle(held_alone, look).link.rfind("other_host", 0), 0u)
      << settle(held_alone, look).detail;
  ASSERT_TRUE(r.d.decided(look, int(Link::kSameHost)));
  EXPECT_EQ(r.d.last().link, "same_host") << r.d.last().detail;
  const Diagnosis& g = r.heldOnHierarchical();
  EXPECT_EQ(g.link, "same_host") << g.detail;
  EXPECT_TRUE(g.carried);
}

// The other way round: lo throttled on the ring, and the first look after it finds the inter-host
// RTT past its threshold further than the same-host RTT (the ranks behind the throttled hop answer
// late), so the policy moves on the inter-host link. The same-host links' delivery rate, a direct
// reading, has collapsed: they are named and carried. f38 bandit r1 (five-phase, 2026-12-07):
// inter-host RTT 10.4 ms at 0.48x its delivery level, same-host 9 ms at 0.007x; the diagnosis
// read "other_host" for the whole intra-host phase.
TEST(Diagnosis, ASameHostDeliveryCollapseIsNamedOverAMoveOnTheInterHostRtt) {
  DeliveryRing r;
  r.j.same_host.delivery = 9.6e9;  // their level, learned while clear
  for (int i = 0; i < 14; ++i) EXPECT_EQ(r.held().cause, "none");
  JobState throttled = r.j;
  throttled.same_host = {9e-3, 12e-3, 7e6, 0.066e9};
  throttled.other_host = {10.4e-3, 12e-3, 0.8e6, 0.477e9};
  const Features& look = r.ex.update(snapshotsOf(throttled), r.next());
  ASSERT_TRUE(r.d.decided(look, int(Link::kOtherHost)));
  EXPECT_EQ(r.d.last().link, "same_host") << r.d.last().detail;
  EXPECT_NE(r.d.last().detail.find("0.01x its level"), std::string::npos) << r.d.last().detail;
  const Diagnosis& g = r.heldOnHierarchical();
  EXPECT_EQ(g.link, "same_host") << g.detail;
  EXPECT_TRUE(g.carried);

  // Clear phases read same-host delivery down to 0.39x its level (f38): no congestion.
  DeliveryRing clear;
  clear.j.same_host.delivery = 9.6e9;
  for (int i = 0; i < 14; ++i) clear.held();
  clear.j.same_host.delivery = 0.39 * 9.6e9;
  EXPECT_EQ(clear.held().cause, "none") << clear.held().detail;
}

// On hierarchical the inter-host RTT is its leaders' own pattern, but the delivery rate still
// shows a throttled uplink once hierarchical has a level of its own (features.h): named there
// too.
TEST(Diagnosis, AThrottledUplinkIsNamedOnHierarchicalByItsDeliveryRate) {
  DeliveryRing r;
  r.j.topology = int(Topology::kHierarchical);
  r.j.same_host = {};
  r.j.other_host.rtt_p50 = 6e-3;  // the leaders' large chunks, congested or not
  for (int i = 0; i < 7; ++i) EXPECT_EQ(r.held().cause, "none");
  r.j.other_host.delivery = 0.2e9;
  const Diagnosis& g = r.held();
  EXPECT_EQ(g.cause, "congested_link");
  EXPECT_EQ(g.link, "other_host:node1") << g.detail;
}

// The controller moved off the ring on a look between steps, before any window step diagnosed
// the link: the link it moved on is the diagnosis at once, and is carried on hierarchical,
// whose own level does not show it.
TEST(Diagnosis, ALinkTheControllerMovedOnIsNamedAtOnceAndCarried) {
  DeliveryRing r;
  JobState throttled = r.j;
  throttled.other_host.delivery = 0.1e9;
  const Features& look = r.ex.update(snapshotsOf(throttled), r.next());
  EXPECT_FALSE(r.d.decided(look, int(Link::kSameHost))) << "same-host links were clear";
  EXPECT_EQ(r.d.last().cause, "none");
  ASSERT_TRUE(r.d.decided(look, int(Link::kOtherHost)));
  EXPECT_EQ(r.d.last().cause, "congested_link");
  EXPECT_EQ(r.d.last().link, "other_host:node1") << r.d.last().detail;
  r.j.topology = int(Topology::kHierarchical);
  r.j.same_host = {};
  r.j.other_host.rtt_p50 = 6e-3;
  const Diagnosis& g = r.held();
  EXPECT_EQ(g.cause, "congested_link");
  EXPECT_EQ(g.link, "other_host:node1") << g.detail;
  EXPECT_TRUE(g.carried);
}

// A look between steps reads a window too short to hold a step sample; the link it moved on is
// named all the same.
TEST(Diagnosis, AMoveDecidedBetweenStepsNamesItsLink) {
  DeliveryRing r;
  JobState throttled = r.j;
  throttled.other_host.delivery = 0.1e9;
  Features look = r.ex.update(snapshotsOf(throttled), r.next());
  look.has_steps = false;
  ASSERT_TRUE(look.live());
  ASSERT_TRUE(r.d.decided(look, int(Link::kOtherHost)));
  EXPECT_EQ(r.d.last().cause, "congested_link");
  EXPECT_EQ(r.d.last().link, "other_host:node1") << r.d.last().detail;
}

// Halving-doubling and bcube cross every link class in large chunks, as the ring does: a
// congestion that begins on them is named there (f36 bandit r0: lo throttled while the bandit ran
// halving-doubling, and the diagnosis read cpu_contention for the whole phase), and carried on
// hierarchical after the move, until the ring probe reads clear.
TEST(Diagnosis, ACongestionThatBeginsOnAnotherFlatTopologyIsNamedAndCarried) {
  for (const Topology flat : {Topology::kHalvingDoubling, Topology::kBcube}) {
    SCOPED_TRACE(int(flat));
    Diagnoser d;
    JobState j = ring();
    j.topology = int(flat);
    EXPECT_EQ(settle(d, featuresOf(j)).cause, "none");
    j.same_host = {60e-3, 120e-3, 7e6};  // f33a: 57-103 ms on halving-doubling with lo throttled
    const Diagnosis& g = settle(d, featuresOf(j));
    EXPECT_EQ(g.cause, "congested_link");
    EXPECT_EQ(g.link, "same_host") << g.detail;
    EXPECT_FALSE(g.carried);

    JobState h;
    h.topology = int(Topology::kHierarchical);
    h.other_host = {6e-3, 14e-3, 7e6};
    Features f = featuresOf(h);
    f.ring_probe = {.seconds = 0.020, .at_ns = 2, .reference_s = 0.004, .ratio = 5};
    const Diagnosis& carried = settle(d, f);
    EXPECT_EQ(carried.link, "same_host") << carried.detail;
    EXPECT_TRUE(carried.carried);
    EXPECT_NE(carried.detail.find("last seen on a flat topology"), std::string::npos)
        << carried.detail;
    f.ring_probe = {.seconds = 0.0045, .at_ns = 3, .reference_s = 0.004, .ratio = 1.125};
    EXPECT_EQ(d.update(f).cause, "none");
  }
}

// Hierarchical's leaders keep the inter-host RTT at 6 ms: no congestion diagnosis from it; a
// diagnosis made on the ring before the switch is carried, marked as such.
TEST(Diagnosis, HierarchicalsOwnTrafficIsNotCongestion) {
  Diagnoser fresh;
  JobState h;
  h.topology = int(Topology::kHierarchical);
  h.other_host = {6e-3, 14e-3, 7e6};
  EXPECT_EQ(settle(fresh, featuresOf(h)).cause, "none");

  Diagnoser d;
  JobState j = ring();
  j.same_host = {12e-3, 40e-3, 7e6};
  settle(d, featuresOf(j));
  const Diagnosis& g = settle(d, featuresOf(h));
  EXPECT_EQ(g.cause, "congested_link");
  EXPECT_EQ(g.link, "same_host");
  EXPECT_TRUE(g.carried);
  // Back on a clear ring: healthy again.
  EXPECT_EQ(settle(d, featuresOf(ring())).cause, "none");
}

// On hierarchical the ring probe answers for the ring's links: a carried link congestion says
// what the probe reads while it reads congested, and ends once it reads clear.
TEST(Diagnosis, TheRingProbeEndsACarriedLinkCongestion) {
  Diagnoser d;
  JobState j = ring();
  j.same_host = {12e-3, 40e-3, 7e6};
  Features on_ring = featuresOf(j);
  // The round taken on the ring before the move read clear; it is still fresh off the ring, but
  // was taken before the congestion the move was made for.
  on_ring.ring_probe = {.seconds = 0.004, .at_ns = 1, .reference_s = 0.004, .ratio = 1};
  settle(d, on_ring);
  JobState h;
  h.topology = int(Topology::kHierarchical);
  h.other_host = {6e-3, 14e-3, 7e6};
  Features f = featuresOf(h);
  f.ring_probe = on_ring.ring_probe;
  EXPECT_EQ(settle(d, f).cause, "congested_link") << "a round from before the move";
  f.ring_probe = {.seconds = 0.020, .at_ns = 2, .reference_s = 0.004, .ratio = 5};
  const Diagnosis& congested = settle(d, f);
  EXPECT_EQ(congested.cause, "congested_link");
  EXPECT_TRUE(congested.carried);
  EXPECT_NE(congested.detail.find("ring probe reads 20.0 ms, 5.00x"), std::string::npos)
      << congested.detail;
  f.ring_probe = {.seconds = 0.0045, .at_ns = 3, .reference_s = 0.004, .ratio = 1.125};
  // At once: one clear round, a direct reading, not a window that needs the hold.
  EXPECT_EQ(d.update(f).cause, "none");
  EXPECT_EQ(settle(d, f).cause, "none");
}

// An inter-host congestion diagnosed on the ring, then carried on hierarchical after the move:
// the job's features there, fed a step (500 ms) at a time.
struct CarriedUplink {
  Diagnoser d;
  Features f;
  int64_t t = 0;
  void start() {
    JobState j = ring();
    j.other_host = {9e-3, 33e-3, 7e6};
    const Diagnosis& seen = settle(d, featuresOf(j));
    ASSERT_EQ(seen.cause, "congested_link");
    EXPECT_EQ(seen.link.rfind("other_host", 0), 0u) << seen.link;
    JobState h;
    h.topology = int(Topology::kHierarchical);
    h.other_host = {6e-3, 14e-3, 7e6};
    f = featuresOf(h);
  }
  // The 1 s window's samples/s and the latest training step's.
  const Diagnosis& step(double window, double latest) {
    t += 500'000'000;
    f.now_ns = t;
    f.samples_per_s_window = window;
    f.samples_per_s = latest;
    return d.update(f);
  }
};

// An inter-host congestion carried off the ring ends when the job runs faster than it did since
// it left the ring (an uplink's lift shows on hierarchical, whose leaders cross it), at once.
TEST(Diagnosis, ARiseEndsACarriedUplinkCongestion) {
  CarriedUplink c;
  ASSERT_NO_FATAL_FAILURE(c.start());
  // The latest step's samples/s stays at 1200: not risen.
  for (int i = 0; i < 12; ++i) EXPECT_EQ(c.step(1200, 1200).cause, "congested_link") << i;
  EXPECT_TRUE(c.d.last().carried);
  EXPECT_EQ(c.step(1700, 1200).cause, "congested_link") << "one step of the rise";
  EXPECT_EQ(c.step(1700, 1200).cause, "none") << "two: at once, without the hold";
}

// The latest training step risen with the window is the verdict at the first risen window: on
// netlab (f40) the diagnosis after an uplink's lift came 1.35-1.59 s after it with two windows in
// a row, where the window first read 1.15x its level 0.39-0.96 s after it.
TEST(Diagnosis, ARiseTheLatestStepCorroboratesEndsACarriedUplinkCongestionAtItsFirstWindow) {
  CarriedUplink c;
  ASSERT_NO_FATAL_FAILURE(c.start());
  for (int i = 0; i < 12; ++i) EXPECT_EQ(c.step(1200, 1200).cause, "congested_link") << i;
  // A fast step alone, and a risen window with a step under 1.15x the level, are not the lift.
  EXPECT_EQ(c.step(1200, 1700).cause, "congested_link") << "the latest step alone";
  EXPECT_EQ(c.step(1200, 1200).cause, "congested_link");
  EXPECT_EQ(c.step(1700, 1300).cause, "congested_link") << "the window alone, one step";
  EXPECT_EQ(c.step(1200, 1200).cause, "congested_link");
  EXPECT_EQ(c.step(1700, 1500).cause, "none") << "both: at once";
}

// With two hosts both ends of a throttled uplink read it: the peer named alternates between
// windows, the diagnosis does not.
TEST(Diagnosis, AnUplinkCongestionDoesNotFlipBetweenItsEnds) {
  Diagnoser d;
  JobState j = ring();
  j.other_host = {9e-3, 33e-3, 7e6};
  Features node1 = featuresOf(j);
  node1.links[size_t(Link::kOtherHost)].worst_peer_node = "node1";
  Features node0 = node1;
  node0.links[size_t(Link::kOtherHost)].worst_peer_node = "node0";
  EXPECT_EQ(settle(d, node1).link, "other_host:node1");
  EXPECT_EQ(settle(d, node0).link, "other_host:node1");
  EXPECT_EQ(settle(d, node0).link, "other_host:node1");
}

// A move off the ring on the same-host links: until it applies, the ring's inter-host RTT rising
// past the same-host one (the ranks behind the throttled hop answer late) does not replace the
// link the move was made for, nor become the one carried off the ring.
TEST(Diagnosis, TheMovesLinkStaysUntilTheMoveApplies) {
  Diagnoser d;
  JobState j = ring();
  j.same_host = {8e-3, 20e-3, 7e6};
  ASSERT_TRUE(d.decided(featuresOf(j), int(Link::kSameHost)));
  EXPECT_EQ(d.last().link, "same_host");
  j.other_host = {10.4e-3, 4e-3, 7e6};
  EXPECT_EQ(settle(d, featuresOf(j)).link, "same_host");
  JobState h;
  h.topology = int(Topology::kHierarchical);
  h.other_host = {6e-3, 14e-3, 7e6};
  const Diagnosis& carried = settle(d, featuresOf(h));
  EXPECT_EQ(carried.link, "same_host");
  EXPECT_TRUE(carried.carried);
}

TEST(Diagnosis, StragglerRankStandsOut) {
  JobState four = ring();
  four.ranks = 4;
  std::vector<window::SeriesSnapshot> w = snapshotsOf(four);
  for (auto& s : w)
    if (s.name == "bpftrain_step_seconds" && s.labels[1].second == "2")
      s.quantiles = {{0.5, 0.4}, {0.9, 0.45}, {0.99, 0.5}};  // rank 2 at 2x the others' 0.2 s
  Diagnoser d;
  const Diagnosis& g = settle(d, extractFeatures(w, "j", 0, nullptr));
  EXPECT_EQ(g.cause, "straggler");
  EXPECT_EQ(g.rank, 2);
}

// CPU contention is run-queue wait, named with the rank that waited most; migrations alone are
// not contention (a clear phase here moves tasks 180-192 times a second).
TEST(Diagnosis, CpuContentionAndMemoryPlacement) {
  std::vector<window::SeriesSnapshot> v = snapshotsOf(ring());
  v.push_back(counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "cpu"}}, 300));
  v.push_back(counter("bpftrain_runqueue_wait_seconds", jr("j", 0), 0.05));
  Diagnoser d;
  EXPECT_EQ(settle(d, extractFeatures(v, "j", 0, nullptr)).cause, "none");
  v.push_back(counter("bpftrain_runqueue_wait_seconds", jr("j", 1), 0.45));
  const Diagnosis& g = settle(d, extractFeatures(v, "j", 0, nullptr));
  EXPECT_EQ(g.cause, "cpu_contention");
  EXPECT_EQ(g.rank, 1);
  EXPECT_NE(g.detail.find("waited 450 ms per second"), std::string::npos) << g.detail;
  v.push_back(counter("bpftrain_numa_hint_faults",
                      {{"job", "j"}, {"rank", "0"}, {"locality", "remote"}}, 60));
  v.push_back(counter("bpftrain_numa_hint_faults",
                      {{"job", "j"}, {"rank", "0"}, {"locality", "local"}}, 40));
  EXPECT_EQ(settle(d, extractFeatures(v, "j", 0, nullptr)).cause, "memory_placement");
}

// When more than one rank waits for a CPU, the diagnosis is the host's (rank -1), and it does not
// flip as the most-waiting rank alternates between steps.
TEST(Diagnosis, ContentionOnSeveralRanksIsTheHostsAndDoesNotFlipBetweenThem) {
  auto waits = [](double rank0_s, double rank1_s) {
    std::vector<window::SeriesSnapshot> v = snapshotsOf(ring());
    v.push_back(counter("bpftrain_runqueue_wait_seconds", jr("j", 0), rank0_s));
    v.push_back(counter("bpftrain_runqueue_wait_seconds", jr("j", 1), rank1_s));
    return extractFeatures(v, "j", 0, nullptr);
  };
  Diagnoser d;
  const Diagnosis& g = settle(d, waits(0.7, 1.1));
  EXPECT_EQ(g.cause, "cpu_contention");
  EXPECT_EQ(g.rank, -1);
  EXPECT_NE(g.detail.find("the most 1100 ms per second and the next 700"), std::string::npos)
      << g.detail;
  const Diagnosis first = g;
  for (int i = 0; i < 6; ++i) {
    const Diagnosis& now = d.update(i % 2 ? waits(0.7, 1.2) : waits(1.2, 0.7));
    EXPECT_TRUE(now.sameAs(first)) << "step " << i << ": " << now.detail;
  }
  // One rank alone above the bar is that rank's.
  EXPECT_EQ(settle(d, waits(0.05, 0.9)).rank, 1);
}

// One noisy window does not flip the diagnosis; two in a row do.
TEST(Diagnosis, ANewCauseMustHoldTwoSteps) {
  Diagnoser d;
  JobState j = ring();
  j.same_host = {12e-3, 40e-3, 7e6};
  const Features congested = featuresOf(j), healthy = featuresOf(ring());
  settle(d, healthy);
  EXPECT_EQ(d.update(congested).cause, "none");
  EXPECT_EQ(d.update(healthy).cause, "none");
  EXPECT_EQ(d.update(congested).cause, "none");
  EXPECT_EQ(d.update(congested).cause, "congested_link");
}

}  // namespace
}  // namespace bpftrain::collector::controller
