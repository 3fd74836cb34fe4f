// A rise of the job's throughput over its level since a mark (a move to another rung, the start
// of a carried congestion): how an uplink's lift shows on hierarchical, whose leaders cross the
// uplink too, where no link signal shows it (the ring probe's 1 MiB crosses a throttled uplink in
// a few ms: ring_probe_judge.h). The level is the mean of the readings from `settle` after the
// mark (the window still holds the previous rung's steps before that), known after
// `min_readings`; a reading at `factor` x the level or more is a rise, and `steps` of them in a
// row are the verdict, or one whose latest step (a second reading: the step the look follows)
// is at `factor` x the level too, when the caller passes it. A rise never becomes the level.
//
// On netlab's five-phase runs (8 runs, 2026-12-05) hierarchical's 1 s window through the
// throttled uplink read at most 1.12x its in-phase median (p99 1.08-1.11), and 1.14-1.54x it
// 1.0-1.3 s after the lift. Used by the rules policy (its re-probe after an uplink climb) and the
// diagnosis (a carried inter-host congestion).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace bpftrain::collector::controller {

struct ThroughputRiseConfig {
  double factor = 1.15;
  int steps = 2;
  int min_readings = 6;
  std::chrono::nanoseconds settle = std::chrono::seconds(2);
};

class ThroughputRise {
 public:
  explicit ThroughputRise(ThroughputRiseConfig config = {}) : config_(config) {}
  // A new level from now_ns (+ settle) on.
  void restart(int64_t now_ns);
  // One step's samples/s (the window's): true once `steps` readings in a row rose, or at the
  // first when `latest_samples_per_s` (the latest training step's; 0: not given) rose as well.
  bool update(double samples_per_s, int64_t now_ns, double latest_samples_per_s = 0);
  // "samples/s rose to X, Nx its Y since ..., for K steps" (for a decision's or diagnosis' text).
  std::string why(const char* since) const;

 private:
  // The mean of the readings since the mark's settling (0 before any).
  double level() const { return n_ > 0 ? sum_ / n_ : 0; }

  ThroughputRiseConfig config_;
  int64_t mark_ns_ = -1;
  double sum_ = 0;
  int n_ = 0;
  int rise_steps_ = 0;
  double last_ = 0;
  double latest_ = 0;  // the latest step's samples/s that corroborated a rise (0: none)
};

}  // namespace bpftrain::collector::controller
