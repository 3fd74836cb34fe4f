// A verdict on the ring's links from a higher rung, from the ring probe (features.h RingProbe):
// clear once `clear_readings` rounds in a row read at or below `clear_ratio` of the ring's clear
// level (the way back needs no re-probe), congested while the last round at or above
// `congested_ratio` is fresh (a re-probe would fail). Each round counts once, however many looks
// see it. Policies own one each and call update() on every look off the ring.
//
// Calibrated for the same-host links only. On netlab (five-phase.json, quiet host, 2026-12-05,
// features log every 100 ms) the probe read 4-8 ms on the clear ring (ratio 0.57-1.3), 16-26 ms
// with lo throttled to 500 Mbit/s (2.45-4.0x), and 4-26 ms with host1's uplink at 2 Gbit/s
// (0.8-4.8x): 1.5 MiB a hop crosses the throttled uplink in a few ms, within the clear spread.
// So the policies ask it about a same-host congestion only; an uplink's way back stays the
// re-probe.
#pragma once

#include <cstdint>
#include <string>

#include "collector/controller/features.h"

namespace bpftrain::collector::controller {

struct RingProbeThresholds {
  double clear_ratio = kRingProbeClearRatio;
  double congested_ratio = kRingProbeCongestedRatio;
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
  void reset(const Features& f) {
    clear_in_a_row_ = 0;
    seen_at_ns_ = f.ring_probe.at_ns;
  }
  int clearInARow() const { return clear_in_a_row_; }

 private:
  RingProbeThresholds t_;
  int clear_in_a_row_ = 0;
  int64_t seen_at_ns_ = -1;    // the round last counted
  int64_t congested_ns_ = -1;  // when a round last read congested
};

}  // namespace bpftrain::collector::controller
