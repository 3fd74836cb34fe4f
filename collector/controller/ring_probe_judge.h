// A verdict on the ring's links from a higher rung, from the ring probe (features.h RingProbe):
// clear once `clear_readings` rounds in a row read clear, congested while the last round that
// read congested is fresh (a re-probe would fail). Each round counts once, however many looks
// see it. Policies and the diagnosis own one each: update() on every look off the ring, reset()
// on it.
//
// A round reads clear at or below `clear_ratio` of the ring's clear level, or at or below
// `drop_fraction` of the level it read since the move (the median of the rounds that did not read
// clear, from `min_congested_rounds` on): the lift of a congestion is a drop, whatever the clear
// level has become. On netlab (five-phase.json, 9 adaptive runs, 2026-12-05) lo throttled to
// 500 Mbit/s read 17.7-19.7 ms (median per run) on quiet and noisy hosts alike, no round below
// 0.78x its run's median; the rounds after the lift read 0.16-0.58x it, while against the ring's
// clear level (3.9-8.2 ms, which moves with the host's load) they read 0.38-2.11x, and one noisy
// run's throttled rounds 1.95x. A round reads congested at or above `congested_ratio` of the
// clear level unless it is such a drop, or, not clear, at or above `hold_fraction` of the level
// since the move: the congestion holds. f29a rules r0 (a clear level of 9.3 ms) read the
// throttled ring at 1.48-2.55x it, every other round under 1.8x, so no round read congested
// for 3 s and the rules re-probed the throttled ring on their timer. 0.65, between the drop
// (0.6) and the throttled rounds' spread: early in a phase the level is the median of a few
// rounds, and there f29a's throttled rounds read 0.65-0.7x it.
//
// Without the ring's clear level (a job that started on congested links climbed before the ring
// probed them clear: `ratio` 0) only the level since the move judges: a drop clears, a hold is
// congested, and the first min_congested_rounds rounds say nothing.
//
// Calibrated for the same-host links only: with host1's uplink at 2 Gbit/s the probe read
// 0.8-4.8x its clear level (1.5 MiB a hop crosses the throttled uplink in a few ms, within the
// clear spread). So the policies ask it about a same-host congestion only; an uplink's way back
// is the re-probe (rules_config.h reprobe_rise_*).
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "collector/controller/features.h"

namespace bpftrain::collector::controller {

struct RingProbeThresholds {
  double clear_ratio = kRingProbeClearRatio;
  double congested_ratio = kRingProbeCongestedRatio;
  double drop_fraction = 0.6;
  double hold_fraction = 0.65;
  int min_congested_rounds = 3;
  int clear_readings = 2;
};

class RingProbeJudge {
 public:
  enum class Verdict { kNone, kClear, kCongested };
  explicit RingProbeJudge(RingProbeThresholds t = {}) : t_(t) {}
  // The verdict at now_ns; `why` says what the probe read when there is one.
  Verdict update(const Features& f, int64_t now_ns, std::string& why);
  // Off the rung it judges from: readings start over, and the round `f` holds never counts (it
  // was taken before the move).
  void reset(const Features& f);
  int clearInARow() const { return clear_in_a_row_; }
  // The median of the rounds since the move that did not read clear; 0 before
  // min_congested_rounds of them.
  double congestedLevel() const;

 private:
  RingProbeThresholds t_;
  int clear_in_a_row_ = 0;
  int64_t seen_at_ns_ = -1;    // the round last counted
  int64_t congested_ns_ = -1;  // when a round last read congested
  static constexpr size_t kHistory = 8;
  std::array<float, kHistory> congested_{};  // seconds, a ring
  uint32_t congested_n_ = 0;                 // rounds ever added since reset()
};

}  // namespace bpftrain::collector::controller
