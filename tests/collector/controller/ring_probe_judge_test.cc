// The ring probe's verdict (ring_probe_judge.h), alone and in the rules policy: the way back
// from hierarchical on the probe's readings, and no re-probe while they read congested.
#include "collector/controller/ring_probe_judge.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <functional>

#include "collector/controller/bandit_policy.h"
#include "collector/controller/rules_policy.h"
#include "tests/collector/controller/synthetic.h"

namespace bpftrain::collector::controller {
namespace {

using namespace testing;

constexpr int64_t kStepNs = 500'000'000;
// The ranks probe every ~1.2 s off the ring (4 steps of 0.3 s on netlab) and every few seconds
// on it; here one round every 1.2 s whatever runs.
constexpr int64_t kProbeEveryNs = 1'200'000'000;

Features probed(double ratio, int64_t at_ns) {
  Features f;
  f.ring_probe = {.seconds = 0.004 * ratio, .at_ns = at_ns, .reference_s = 0.004, .ratio = ratio};
  return f;
}

// Each round counts once however many looks see it; clear takes two in a row, a congested round
// holds while fresh; a stale round or none says nothing; reset() never counts the round it saw.
TEST(RingProbeJudge, RoundsInARowFreshnessAndReset) {
  using V = RingProbeJudge::Verdict;
  RingProbeJudge j;
  std::string why;
  EXPECT_EQ(j.update(Features{}, 0, why), V::kNone);
  EXPECT_EQ(j.update(probed(5, 1 * kStepNs), 1 * kStepNs, why), V::kCongested);
  EXPECT_NE(why.find("20.0 ms, 5.00x"), std::string::npos) << why;
  EXPECT_EQ(j.update(probed(1, 2 * kStepNs), 2 * kStepNs, why), V::kCongested);  // still fresh
  EXPECT_EQ(j.update(probed(1, 2 * kStepNs), 3 * kStepNs, why), V::kCongested);  // same round
  EXPECT_EQ(j.clearInARow(), 1);
  EXPECT_EQ(j.update(probed(1.2, 4 * kStepNs), 4 * kStepNs, why), V::kClear);
  EXPECT_NE(why.find("2 rounds in a row"), std::string::npos) << why;
  const int64_t stale = 4 * kStepNs + RingProbe::kFreshNs + 1;
  EXPECT_EQ(j.update(probed(1.2, 4 * kStepNs), stale, why), V::kNone);
  RingProbeJudge k;
  k.reset(probed(1, 9 * kStepNs));
  EXPECT_EQ(k.update(probed(1, 9 * kStepNs), 9 * kStepNs, why), V::kNone);
  EXPECT_EQ(k.clearInARow(), 0);
}

// A lift is a drop from what the probe read since the move, whatever the clear level became: on a
// noisier host the rounds after it read 2.1x the ring's clear level (above the congested ratio)
// but 0.5x the throttled rounds. Before min_congested_rounds such a round is congested; noisy
// throttled rounds (0.8-1.2x their level) never read as a drop.
TEST(RingProbeJudge, ALiftIsADropFromTheLevelSinceTheMove) {
  using V = RingProbeJudge::Verdict;
  std::string why;
  RingProbeJudge early;
  EXPECT_EQ(early.update(probed(4.5, 1 * kStepNs), 1 * kStepNs, why), V::kCongested);
  EXPECT_EQ(early.update(probed(2.1, 2 * kStepNs), 2 * kStepNs, why), V::kCongested);
  EXPECT_EQ(early.clearInARow(), 0) << "no level since the move yet";

  RingProbeJudge j;
  const double throttled[] = {4.5, 3.8, 5.4, 4.1, 3.6, 5.2};  // 18 ms +- 20%
  int64_t t = 0;
  for (double r : throttled) {
    t += kStepNs;
    EXPECT_EQ(j.update(probed(r, t), t, why), V::kCongested) << r;
    EXPECT_EQ(j.clearInARow(), 0);
  }
  EXPECT_NEAR(j.congestedLevel(), 0.004 * 4.5, 1e-6);
  t += kStepNs;
  j.update(probed(2.1, t), t, why);
  EXPECT_EQ(j.clearInARow(), 1);
  t += kStepNs;
  EXPECT_EQ(j.update(probed(2.0, t), t, why), V::kClear);
  EXPECT_NE(why.find("0.44x its 18.0 ms since the move"), std::string::npos) << why;
  // The clear rounds did not become the level.
  EXPECT_NEAR(j.congestedLevel(), 0.004 * 4.5, 1e-6);
  j.reset(probed(2.0, t));
  EXPECT_EQ(j.congestedLevel(), 0);
}

// A throttled ring read against a high clear level (f29a rules r0: 9.3 ms, the rounds every
// ~1.1 s through the intra-host phase) crosses under the congested ratio every other round; the
// congestion holds on its level since the move, so the verdict stays congested (the rules then
// do not re-probe the ring into it).
TEST(RingProbeJudge, ACongestionHoldsOnItsLevelSinceTheMove) {
  using V = RingProbeJudge::Verdict;
  const double clear_s = 0.0093;
  const double rounds_ms[] = {24.1, 23.4, 18.5, 21.4, 15.2, 15.0, 19.7, 16.9,
                              23.8, 13.8, 16.5, 22.2, 14.7, 16.0, 22.0, 18.5};
  RingProbeJudge j;
  std::string why;
  int64_t t = 0;
  int congested = 0, looks = 0;
  for (double ms : rounds_ms) {
    const int64_t at = t;
    Features f;
    f.ring_probe = {
        .seconds = ms * 1e-3, .at_ns = at, .reference_s = clear_s, .ratio = ms * 1e-3 / clear_s};
    for (int look = 0; look < 2; ++look, t += kStepNs + kStepNs / 5) {  // 1.2 s a round
      const V v = j.update(f, t, why);
      ++looks;
      congested += v == V::kCongested;
      EXPECT_NE(v, V::kClear) << ms;
    }
  }
  EXPECT_EQ(congested, looks) << "the verdict lapsed while the ring stayed throttled";
  // And the lift still reads clear: 0.3-0.5x the level since the move.
  for (double ms : {7.0, 6.0}) {
    Features f;
    f.ring_probe = {
        .seconds = ms * 1e-3, .at_ns = t, .reference_s = clear_s, .ratio = ms * 1e-3 / clear_s};
    t += kStepNs;
    j.update(f, t, why);
  }
  EXPECT_EQ(j.clearInARow(), 2);
}

struct Move {
  double t;
  Topology to;
  std::string reason, detail;
};

// Same-host congestion between `from` and `to` seconds. The ring's links as the tcp probe and the
// ring probe read them: on the ring its same-host RTT; on hierarchical no same-host traffic, and
// the ring probe 4 ms clear, 20 ms with lo throttled (1.5 MiB a hop at 500 Mbit/s, less the
// TBF's 256 KB burst), whatever topology runs.
// `after_s`: what the probe reads after the lift (the clear level on a quiet host; more on a
// noisier one). `halving_doubling_clear` > 0: halving-doubling is a flat topology as the ring
// (its same-host chunks over the same links), at this many samples/s clear and 0.3x it congested;
// otherwise it runs as hierarchical does. `ring_settling`: the ring's samples/s for its first 3 s
// after a switch to it, as a fraction of its level (netlab's ring read low after hierarchical).
// `probes_on_ring` false: no rounds while the ring runs (the trainer probes only every 16 steps
// there, so a job that climbs in its first steps has none).
std::vector<Move> intraHost(Policy& p, double seconds, double from, double to, bool probe = true,
                            double after_s = 0.004,
                            const std::function<double(double)>& hierarchical = {},
                            double halving_doubling_clear = 0, double ring_settling = 1,
                            bool probes_on_ring = true) {
  std::vector<Move> out;
  Topology cur = Topology::kRing;
  FeatureExtractor ex("j");
  double switched_t = -10;
  for (int64_t ns = 0; ns <= int64_t(seconds * 1e9); ns += kStepNs) {
    const double t = double(ns) * 1e-9;
    const bool congested = t >= from && t < to;
    JobState j;
    const bool ring = cur == Topology::kRing;
    const bool hd_flat = halving_doubling_clear > 0 && cur == Topology::kHalvingDoubling;
    j.topology = int(cur);
    j.samples_per_s_per_rank =
        ring           ? (congested ? 150 : 500) * (t - switched_t < 3 ? ring_settling : 1)
        : hd_flat      ? (congested ? 0.3 : 1) * halving_doubling_clear
        : hierarchical ? hierarchical(t)
                       : 400;
    if (ring || hd_flat) j.same_host = {congested ? 9e-3 : 0.2e-3, congested ? 33e-3 : 1.5e-3, 6e6};
    j.other_host = {ring || hd_flat ? 1.3e-3 : 6e-3, ring || hd_flat ? 6.5e-3 : 14e-3, 6e6};
    if (probe && (probes_on_ring || !ring)) {
      const int64_t at = ns / kProbeEveryNs * kProbeEveryNs;
      const double at_s = double(at) * 1e-9;
      j.ring_probe_s = at_s >= from && at_s < to ? 0.020 : at_s >= to ? after_s : 0.004;
      j.ring_probe_at_ns = at;
    }
    const Decision d = p.decide(ex.update(snapshotsOf(j), ns), Arm{cur, PinMode::kNone}, ns);
    if (d.change) {
      out.push_back({t, d.to.topology, std::string(d.reason), d.detail});
      cur = d.to.topology;
      switched_t = t;
    }
  }
  return out;
}

TEST(RingProbeWayBack, StepsBackWhenTheProbeReadsTheRingClearAndNeverReprobesBefore) {
  RulesPolicy p;
  const auto moves = intraHost(p, 90, 30, 70);
  ASSERT_EQ(moves.size(), 2u) << "up once, back once: no re-probe while the probe reads 5x";
  EXPECT_EQ(moves[0].to, Topology::kHierarchical);
  EXPECT_LE(moves[0].t, 30.5);
  EXPECT_EQ(moves[1].to, Topology::kRing);
  EXPECT_EQ(moves[1].reason, "clear");
  EXPECT_NE(moves[1].detail.find("ring probe"), std::string::npos) << moves[1].detail;
  // Two clear rounds after the lift (1.2 s apart), read at the next window step.
  EXPECT_GE(moves[1].t, 70.0);
  EXPECT_LE(moves[1].t, 70.0 + 2 * 1.2 + 0.5);
}

// The same on a noisier host, whose rounds after the lift read 8 ms, 2x the ring's clear level:
// the drop from the throttled 20 ms steps back as soon.
TEST(RingProbeWayBack, StepsBackOnTheDropWhenTheClearLevelRose) {
  RulesPolicy p;
  const auto moves = intraHost(p, 90, 30, 70, true, 0.008);
  ASSERT_EQ(moves.size(), 2u);
  EXPECT_EQ(moves[1].to, Topology::kRing);
  EXPECT_EQ(moves[1].reason, "clear");
  EXPECT_LE(moves[1].t, 70.0 + 2 * 1.2 + 0.5);
}

// A job that starts on congested same-host links climbs before the ring probe ever read them
// clear: no clear level. Its rounds are judged against their level since the move: held there,
// no re-probe; the lift's drop steps back. Before, such rounds gave no verdict, and the rules
// re-probed the throttled ring on their timer (netlab, lo at 500 Mbit/s from the start: 8 s
// after the climb, and again).
TEST(RingProbeWayBack, AJobThatStartsCongestedIsJudgedOnTheLevelSinceTheMove) {
  RulesPolicy p;
  const auto moves = intraHost(p, 70, 0, 40, true, 0.004, {}, 0, 1, false);
  for (const Move& m : moves)
    std::printf("%.1f s: %s (%s) %s\n", m.t, topologyName(m.to).data(), m.reason.c_str(),
                m.detail.c_str());
  ASSERT_EQ(moves.size(), 2u) << "up once, back once: no re-probe while the rounds hold";
  EXPECT_EQ(moves[0].to, Topology::kHierarchical);
  EXPECT_LE(moves[0].t, 4.0);
  EXPECT_EQ(moves[1].to, Topology::kRing);
  EXPECT_EQ(moves[1].reason, "clear");
  EXPECT_NE(moves[1].detail.find("no clear level yet"), std::string::npos) << moves[1].detail;
  EXPECT_GE(moves[1].t, 40.0);
  EXPECT_LE(moves[1].t, 40.0 + 2 * 1.2 + 0.5);
}

// The bandit on the same start: the congested links are a change from the start, hierarchical
// is tried first and halving-doubling held back; the ring comes back on the probe's drop.
TEST(RingProbeWayBack, TheBanditOnAJobThatStartsCongested) {
  BanditPolicy p;
  const auto moves = intraHost(p, 70, 0, 40, true, 0.004, {}, 0, 1, false);
  for (const Move& m : moves)
    std::printf("%.1f s: %s (%s) %s\n", m.t, topologyName(m.to).data(), m.reason.c_str(),
                m.detail.c_str());
  ASSERT_GE(moves.size(), 2u);
  EXPECT_EQ(moves[0].to, Topology::kHierarchical);
  EXPECT_EQ(moves[0].reason, "change_detected");
  EXPECT_LE(moves[0].t, 4.0);
  for (const Move& m : moves) {
    if (m.t >= 40) break;
    EXPECT_NE(m.to, Topology::kHalvingDoubling) << m.t << " s: " << m.detail;
    EXPECT_FALSE(m.to == Topology::kRing && m.t > 1) << m.t << " s: " << m.detail;
  }
  bool back = false;
  for (const Move& m : moves) back = back || (m.to == Topology::kRing && m.t >= 40 && m.t < 43);
  EXPECT_TRUE(back) << "the ring probe's way back at the lift";
}

// Without the ring's clear level, rounds count from the third since the move (the level): the
// first two say nothing, a hold is congested, two drops in a row clear.
TEST(RingProbeJudge, WithoutAClearLevelTheLevelSinceTheMoveJudges) {
  using V = RingProbeJudge::Verdict;
  RingProbeJudge j;
  std::string why;
  auto round = [](double ms, int64_t at) {
    Features f;
    f.ring_probe = {.seconds = ms * 1e-3, .at_ns = at};  // ratio 0: no clear level
    return f;
  };
  int64_t t = 0;
  EXPECT_EQ(j.update(round(19, t), t, why), V::kNone);
  t += kStepNs;
  EXPECT_EQ(j.update(round(21, t), t, why), V::kNone);
  t += kStepNs;
  EXPECT_EQ(j.update(round(18, t), t, why), V::kNone) << "the third makes the level";
  t += kStepNs;
  EXPECT_EQ(j.update(round(17, t), t, why), V::kCongested);
  EXPECT_NE(why.find("no clear level yet"), std::string::npos) << why;
  t += kStepNs;
  j.update(round(6, t), t, why);
  t += kStepNs;
  EXPECT_EQ(j.update(round(5, t), t, why), V::kClear);
  EXPECT_NE(why.find("its 19.0 ms since the move"), std::string::npos) << why;
}

TEST(RingProbeWayBack, WithoutTheProbeTheWayBackIsAReprobe) {
  RulesPolicy p;
  const auto moves = intraHost(p, 90, 30, 70, false);
  ASSERT_GE(moves.size(), 3u);
  EXPECT_EQ(moves[1].reason, "reprobe");  // during the congestion: it fails and climbs back
  EXPECT_LT(moves[1].t, 70.0);
}

// One clear round among congested ones is no way back: the readings must agree in a row.
TEST(RingProbeWayBack, OneClearReadingIsNotEnough) {
  RulesPolicy p;
  // Congested from 30 s on, but the round taken at 50.4 s reads clear.
  std::vector<Move> out;
  Topology cur = Topology::kRing;
  FeatureExtractor ex("j");
  for (int64_t ns = 0; ns <= 80'000'000'000; ns += kStepNs) {
    const double t = double(ns) * 1e-9;
    JobState j;
    const bool ring = cur == Topology::kRing;
    j.topology = int(cur);
    j.samples_per_s_per_rank = ring ? (t >= 30 ? 150 : 500) : 400;
    if (ring) j.same_host = {t >= 30 ? 9e-3 : 0.2e-3, t >= 30 ? 33e-3 : 1.5e-3, 6e6};
    j.other_host = {ring ? 1.3e-3 : 6e-3, ring ? 6.5e-3 : 14e-3, 6e6};
    const int64_t at = ns / kProbeEveryNs * kProbeEveryNs;
    j.ring_probe_s = at < 30'000'000'000 || at == 50'400'000'000 ? 0.004 : 0.020;
    j.ring_probe_at_ns = at;
    const Decision d = p.decide(ex.update(snapshotsOf(j), ns), Arm{cur, PinMode::kNone}, ns);
    if (d.change) {
      out.push_back({t, d.to.topology, std::string(d.reason), d.detail});
      cur = d.to.topology;
    }
  }
  ASSERT_EQ(out.size(), 1u) << out.back().reason << " at " << out.back().t;
  EXPECT_EQ(out[0].to, Topology::kHierarchical);
}

// The bandit's way back from the arm a same-host change drove it to: the ring re-probed as soon
// as the probe reads it clear, and not while it reads it congested.
TEST(RingProbeWayBack, TheBanditReprobesTheRingWhenTheProbeReadsItClear) {
  auto ringMoves = [](const std::vector<Move>& moves, double from, double to) {
    std::vector<Move> out;
    for (const Move& m : moves)
      if (m.to == Topology::kRing && m.t >= from && m.t < to) out.push_back(m);
    return out;
  };
  BanditPolicy with;
  const auto moves = intraHost(with, 90, 30, 70);
  EXPECT_TRUE(ringMoves(moves, 32, 70).empty()) << ringMoves(moves, 32, 70).front().detail;
  const auto back = ringMoves(moves, 70, 90);
  ASSERT_FALSE(back.empty());
  EXPECT_LE(back.front().t, 70.0 + 2 * 1.2 + 0.5);
  EXPECT_NE(back.front().detail.find("ring probe"), std::string::npos) << back.front().detail;

  BanditPolicy without;
  EXPECT_FALSE(ringMoves(intraHost(without, 90, 30, 70, false), 32, 70).empty())
      << "without the probe the way back is the backed-off re-probe, tried while congested";
}

// The ring's first readings after hierarchical read low (netlab, f31c clear-again: 398-407
// samples/s against hierarchical's 416-461; its steady level 500-580). A re-probe made on the
// probe's clear verdict is kept on its links, as the rules keep their step down, unless slow:
// here it reads 0.8x its level (400, hierarchical's) for 3 s and is kept at the lift; before,
// it lost and the ring came back only on a later verdict.
TEST(RingProbeWayBack, TheBanditKeepsAProbeReprobeOfTheRingThatReadsLowAtFirst) {
  BanditPolicy p;
  const auto moves = intraHost(p, 90, 30, 70, true, 0.004, {}, 0, 0.8);
  for (const Move& m : moves)
    std::printf("%.1f s: %s (%s) %s\n", m.t, topologyName(m.to).data(), m.reason.c_str(),
                m.detail.c_str());
  auto first = std::find_if(moves.begin(), moves.end(), [](const Move& m) { return m.t >= 70; });
  ASSERT_NE(first, moves.end());
  EXPECT_EQ(first->to, Topology::kRing);
  EXPECT_LE(first->t, 70.0 + 2 * 1.2 + 0.5);
  EXPECT_NE(first->detail.find("ring probe"), std::string::npos) << first->detail;
  // Kept: hierarchical is not gone back to (the re-exploration may still try halving-doubling).
  for (auto it = first; it != moves.end(); ++it)
    EXPECT_NE(it->to, Topology::kHierarchical) << it->t << " s: " << it->detail;
}

// Hierarchical's throughput does not follow the same-host links (shared memory): a bump of it
// during a same-host congestion is no lift (f29c bandit r0: 1.15x, 11 s into the intra-host
// phase, read as a change; the ring's way back was lost and the next clear phase ran on
// hierarchical). The bandit stays, and the ring probe still brings the ring back at the lift.
TEST(RingProbeWayBack, TheBanditTakesNoRiseOfHierarchicalForASameHostLift) {
  BanditPolicy p;
  const auto moves =
      intraHost(p, 90, 30, 70, true, 0.004, [](double t) { return t >= 45 && t < 50 ? 480 : 400; });
  for (const Move& m : moves)
    std::printf("%.1f s: %s (%s)\n", m.t, topologyName(m.to).data(), m.reason.c_str());
  for (const Move& m : moves)
    EXPECT_FALSE(m.t >= 32 && m.t < 70) << m.t << " s: " << m.reason << ": " << m.detail;
  bool back = false;
  for (const Move& m : moves) back = back || (m.to == Topology::kRing && m.t >= 70 && m.t < 73);
  EXPECT_TRUE(back) << "the ring probe's way back at the lift";
}

// A drop of hierarchical during the same-host congestion (host noise: f32b bandit r0 read 366
// samples/s against 418, 16 s into the intra-host phase) is a change, but not of the congestion
// that drove the bandit from the ring: the flat arms stay held back (their trials would cross
// the congested links) and the ring probe still brings the ring back at the lift. Before, the
// drop made hierarchical the arm to come back to, the ring and halving-doubling were tried on
// congested links, and the way back was the rise of hierarchical's throughput, 16 s after the
// lift.
TEST(RingProbeWayBack, ADropOfHierarchicalDuringTheCongestionKeepsTheWayBack) {
  BanditPolicy p;
  const auto moves =
      intraHost(p, 90, 30, 70, true, 0.004, [](double t) { return t >= 45 && t < 48 ? 250 : 400; });
  for (const Move& m : moves)
    std::printf("%.1f s: %s (%s) %s\n", m.t, topologyName(m.to).data(), m.reason.c_str(),
                m.detail.c_str());
  EXPECT_GE(p.changesDetected(), 2) << "the onset and the drop";
  for (const Move& m : moves)
    EXPECT_FALSE(m.t >= 32 && m.t < 70) << m.t << " s: " << m.reason << ": " << m.detail;
  auto back = std::find_if(moves.begin(), moves.end(), [](const Move& m) { return m.t >= 70; });
  ASSERT_NE(back, moves.end());
  EXPECT_EQ(back->to, Topology::kRing);
  EXPECT_LE(back->t, 70.0 + 2 * 1.2 + 0.5);
  EXPECT_NE(back->detail.find("ring probe"), std::string::npos) << back->detail;
}

// The same way back when the bandit had left halving-doubling (the clear phase's best here,
// 1.12x the ring) at the onset: halving-doubling's same-host chunks cross the links the ring
// probe reads, so its re-probe comes at the lift, not on the re-probe timer.
TEST(RingProbeWayBack, TheBanditReprobesHalvingDoublingWhenTheProbeReadsTheLinksClear) {
  BanditPolicy p;
  const auto moves = intraHost(p, 90, 30, 70, true, 0.004, {}, 560);
  for (const Move& m : moves)
    std::printf("%.1f s: %s (%s) %s\n", m.t, topologyName(m.to).data(), m.reason.c_str(),
                m.detail.c_str());
  Topology at_onset = Topology::kRing;
  for (const Move& m : moves)
    if (m.t < 30) at_onset = m.to;
  ASSERT_EQ(at_onset, Topology::kHalvingDoubling) << "the clear phase's best before the onset";
  bool up = false, back = false;
  for (const Move& m : moves) {
    up = up || (m.to == Topology::kHierarchical && m.t >= 30 && m.t < 33);
    EXPECT_FALSE(m.t >= 33 && m.t < 70) << m.t << " s: " << m.reason << ": " << m.detail;
    if (!back && m.t >= 70 && m.to == Topology::kHalvingDoubling) {
      back = true;
      EXPECT_LE(m.t, 70.0 + 2 * 1.2 + 0.5);
      EXPECT_NE(m.detail.find("ring probe"), std::string::npos) << m.detail;
    }
  }
  EXPECT_TRUE(up) << "hierarchical at the onset";
  EXPECT_TRUE(back) << "halving-doubling again after the lift";
}

// A drop on the ring that no link class showed at the change (an uplink's throttle read by
// throughput first), so the probe judges the way back, but the probe reads the congestion at
// 1-2.3x its clear level (an uplink's spread, RingProbeJudge): some rounds read clear in a row.
// One re-probe on such a verdict may fail; after it the way back is the timer's.
TEST(RingProbeWayBack, AFailedReprobeOnTheProbesVerdictHandsTheWayBackToTheTimer) {
  BanditPolicy p;
  Topology cur = Topology::kRing;
  FeatureExtractor ex("j");
  int by_probe = 0, ring_moves = 0;
  for (int64_t ns = 0; ns <= 70'000'000'000; ns += kStepNs) {
    const double t = double(ns) * 1e-9;
    const bool congested = t >= 30;
    JobState j;
    const bool ring = cur == Topology::kRing;
    j.topology = int(cur);
    j.samples_per_s_per_rank = ring ? (congested ? 250 : 500) : 400;
    if (ring) j.same_host = {0.2e-3, 1.5e-3, 6e6};
    j.other_host = {ring ? 1.3e-3 : 6e-3, ring ? 6.5e-3 : 14e-3, 6e6};
    const int64_t at = ns / kProbeEveryNs * kProbeEveryNs;
    const int64_t round = at / kProbeEveryNs;
    // Throttled: rounds of 4, 5, 9 ms in turn (1-2.3x the 4 ms clear level).
    j.ring_probe_s = !congested ? 0.004 : round % 3 == 2 ? 0.009 : round % 3 == 1 ? 0.005 : 0.004;
    j.ring_probe_at_ns = at;
    const Decision d = p.decide(ex.update(snapshotsOf(j), ns), Arm{cur, PinMode::kNone}, ns);
    if (d.change) {
      std::printf("%.1f s: %s (%s) %s\n", t, topologyName(d.to.topology).data(),
                  std::string(d.reason).c_str(), d.detail.c_str());
      if (t >= 32 && d.to.topology == Topology::kRing) {
        ++ring_moves;
        by_probe += d.detail.find("ring probe") != std::string::npos;
      }
      cur = d.to.topology;
    }
  }
  EXPECT_EQ(by_probe, 1) << "one re-probe on the probe's verdict, then the timer's";
  EXPECT_LE(ring_moves, 1 + 3) << "the timer's, 8 s and doubling, in 38 s";
}

}  // namespace
}  // namespace bpftrain::collector::controller
