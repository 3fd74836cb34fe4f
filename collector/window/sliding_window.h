// A sliding window over time as a ring of step buckets: each bucket holds one step's count, sum,
// min, max and (for distributions) a quantile sketch. A sample lands in the bucket of its step;
// a bucket is reused (cleared, capacity kept) when a later step maps to its slot, which is how old
// steps are evicted without a timer. Queries merge the buckets of the last `steps` completed steps
// plus the step in progress. Not thread-safe: the series store guards each writer's window.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "collector/window/sketch.h"

namespace bpftrain::collector::window {

struct WindowSpec {
  int64_t step_ns = 500'000'000;
  int steps = 10;  // completed steps in the window (window / step)
  bool with_sketch = false;
  double relative_error = kDefaultRelativeError;
  uint32_t max_bins = kDefaultMaxBins;
};

// Running aggregate of buckets; also the unit a child collector forwards upstream.
struct StepAggregate {
  uint64_t count = 0;
  double sum = 0;
  double min = std::numeric_limits<double>::infinity();
  double max = -std::numeric_limits<double>::infinity();
  double last = 0;  // the value with the latest timestamp
  int64_t last_ns = std::numeric_limits<int64_t>::min();

  void add(double v, int64_t now_ns) {
    ++count;
    sum += v;
    if (v < min) min = v;
    if (v > max) max = v;
    if (now_ns >= last_ns) {
      last = v;
      last_ns = now_ns;
    }
  }
  void merge(const StepAggregate& o) {
    count += o.count;
    sum += o.sum;
    if (o.min < min) min = o.min;
    if (o.max > max) max = o.max;
    if (o.count > 0 && o.last_ns >= last_ns) {
      last = o.last;
      last_ns = o.last_ns;
    }
  }
};

class SlidingWindow {
 public:
  SlidingWindow() : SlidingWindow(WindowSpec{}) {}
  explicit SlidingWindow(const WindowSpec& spec);

  int64_t stepOf(int64_t now_ns) const { return floorDiv(now_ns, spec_.step_ns); }

  // Adds a sample at now_ns; false when the sample is older than the ring (not windowed).
  bool add(int64_t now_ns, double value);
  // Merges a whole step's aggregate (and sketch, for distributions) into the step of now_ns.
  bool mergeAt(int64_t now_ns, const StepAggregate& agg, const Sketch* sketch);

  // Adds the buckets inside the window ending at now_ns to `agg` and `sketch` (if not null).
  // `steps` < spec().steps narrows the window to that many completed steps (plus the current).
  void collect(int64_t now_ns, StepAggregate& agg, Sketch* sketch, int steps = -1) const;
  // Adds one step's bucket; false when that step is not in the ring or has no samples.
  bool collectStep(int64_t step, StepAggregate& agg, Sketch* sketch) const;

  // Rate of `amount` over the window ending at now_ns, for a series whose first sample was in
  // step first_step: amount / seconds covered (never less than one step; with steps 0, the step
  // in progress alone, what it has run, at least a tenth of a step).
  double rate(double amount, int64_t now_ns, int64_t first_step, int steps = -1) const;

  // How many completed steps before the one in progress a reading of `window_ns` at now_ns
  // takes: the fewest whose time, with what the step in progress has run, covers the window.
  // A multiple of the step always takes that many (1 s of 500 ms steps: 2, so 1-1.5 s of
  // samples); a window the step in progress has already run takes none (250 ms, 300 ms into a
  // step: that step alone), so a short window does not carry a whole older step with it.
  static int stepsBefore(int64_t now_ns, int64_t window_ns, int64_t step_ns) {
    step_ns = std::max<int64_t>(step_ns, 1);
    const int64_t age = now_ns - floorDiv(now_ns, step_ns) * step_ns;
    if (window_ns <= age) return 0;
    return int((window_ns - age + step_ns - 1) / step_ns);
  }

  // Earliest step that ever received a sample (for rates of young series); INT64_MAX if none.
  int64_t firstStep() const { return first_step_; }
  const WindowSpec& spec() const { return spec_; }
  size_t memoryBytes() const;

  static int64_t floorDiv(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
  }

 private:
  struct Bucket {
    int64_t step = std::numeric_limits<int64_t>::min();
    StepAggregate agg;
  };
  int stepsOr(int steps) const;  // `steps` clamped to the ring; -1: the whole window
  // The bucket for `step`, reset if it held an older step; null if it holds a newer one.
  size_t slotFor(int64_t step, bool& ok);

  // Hot fields first, so a record() inside the current step touches one cache line of this
  // object. The newest step's time range lets those samples skip the divisions.
  int64_t cur_start_ns_ = 0, cur_end_ns_ = 0;
  size_t cur_slot_ = 0;
  std::vector<Bucket> buckets_;   // steps + 1 slots
  std::vector<Sketch> sketches_;  // parallel to buckets_ when spec_.with_sketch
  WindowSpec spec_;
  int64_t cur_step_ = std::numeric_limits<int64_t>::min();
  int64_t first_step_ = std::numeric_limits<int64_t>::max();
};

}  // namespace bpftrain::collector::window
