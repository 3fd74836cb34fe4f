#include "collector/window/sliding_window.h"

#include <algorithm>

namespace bpftrain::collector::window {

SlidingWindow::SlidingWindow(const WindowSpec& spec) : spec_(spec) {
  spec_.step_ns = std::max<int64_t>(spec_.step_ns, 1);
  spec_.steps = std::max(spec_.steps, 1);
  buckets_.resize(size_t(spec_.steps) + 1);
  if (spec_.with_sketch)
    sketches_.assign(buckets_.size(), Sketch(spec_.relative_error, spec_.max_bins));
}

size_t SlidingWindow::slotFor(int64_t step, bool& ok) {
  const int64_t n = int64_t(buckets_.size());
  size_t slot = size_t(((step % n) + n) % n);
  Bucket& b = buckets_[slot];
  ok = b.step <= step;  // else the slot already moved on: older than the ring
  if (!ok) return slot;
  if (b.step < step) {
    b.step = step;
    b.agg = StepAggregate{};
    if (spec_.with_sketch) sketches_[slot].clear();
  }
  if (step > cur_step_) {
    cur_step_ = step;
    cur_start_ns_ = step * spec_.step_ns;
    cur_end_ns_ = cur_start_ns_ + spec_.step_ns;
    cur_slot_ = slot;
  }
  if (step < first_step_) first_step_ = step;
  return slot;
}

bool SlidingWindow::add(int64_t now_ns, double value) {
  size_t slot = cur_slot_;
  if (now_ns < cur_start_ns_ || now_ns >= cur_end_ns_) [[unlikely]] {
    bool ok;
    slot = slotFor(stepOf(now_ns), ok);
    if (!ok) return false;
  }
  buckets_[slot].agg.add(value, now_ns);
  if (!sketches_.empty()) sketches_[slot].add(value);
  return true;
}

bool SlidingWindow::mergeAt(int64_t now_ns, const StepAggregate& agg, const Sketch* sketch) {
  bool ok;
  size_t slot = slotFor(stepOf(now_ns), ok);
  if (!ok) return false;
  buckets_[slot].agg.merge(agg);
  if (spec_.with_sketch && sketch) sketches_[slot].merge(*sketch);
  return true;
}

int SlidingWindow::stepsOr(int steps) const {
  return steps < 0 || steps > spec_.steps ? spec_.steps : steps;
}

void SlidingWindow::collect(int64_t now_ns, StepAggregate& agg, Sketch* sketch, int steps) const {
  // Buckets written by a writer whose clock read slightly ahead of ours count too.
  const int64_t oldest = stepOf(now_ns) - stepsOr(steps);
  for (size_t i = 0; i < buckets_.size(); ++i) {
    const Bucket& b = buckets_[i];
    if (b.step < oldest || b.agg.count == 0) continue;
    agg.merge(b.agg);
    if (sketch && spec_.with_sketch) sketch->merge(sketches_[i]);
  }
}

bool SlidingWindow::collectStep(int64_t step, StepAggregate& agg, Sketch* sketch) const {
  const int64_t n = int64_t(buckets_.size());
  size_t slot = size_t(((step % n) + n) % n);
  const Bucket& b = buckets_[slot];
  if (b.step != step || b.agg.count == 0) return false;
  agg.merge(b.agg);
  if (sketch && spec_.with_sketch) sketch->merge(sketches_[slot]);
  return true;
}

double SlidingWindow::rate(double amount, int64_t now_ns, int64_t first_step, int steps) const {
  const int64_t window_start = (stepOf(now_ns) - stepsOr(steps)) * spec_.step_ns;
  const int64_t start = std::max(window_start, first_step * spec_.step_ns);
  const int64_t covered = std::max(now_ns - start, steps == 0 ? spec_.step_ns / 10 : spec_.step_ns);
  return amount / (double(covered) * 1e-9);
}

size_t SlidingWindow::memoryBytes() const {
  size_t bytes = buckets_.capacity() * sizeof(Bucket) + sketches_.capacity() * sizeof(Sketch);
  for (const Sketch& s : sketches_) bytes += s.memoryBytes();
  return bytes;
}

}  // namespace bpftrain::collector::window
