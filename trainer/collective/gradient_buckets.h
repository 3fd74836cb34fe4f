// The gradient allreduce as B buckets, in order (as PyTorch DDP runs it), each carrying the
// trainer's small tail (the 8-float sync word): every rank reads the same summed tail after each
// bucket, so a configuration can change between the buckets of one step, on every rank at the same
// bucket. Bucket i sums gradients [begin(i), end(i)) and the `tail` floats right after them: the
// buffer's own tail for the last bucket, else the next bucket's first floats, lent for the call
// (saved before it, given back after it, so the next bucket sums them as they were). No extra round
// trip, no copy of the gradients, nothing allocated per step.
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>
#include <vector>

namespace bpftrain::trainer::collective {

class GradientBuckets {
 public:
  // A bucket holds at least this many gradient floats (256 KiB): below that a bucket's fixed cost
  // (its allreduce's round trips) is no longer small, and its allreduce too short for a switch
  // inside the step to matter. The digits model (9.6k parameters) therefore runs one bucket.
  static constexpr size_t kMinBucketFloats = 64 * 1024;
  // Bucket boundaries fall on multiples of this many floats (4 KiB pages).
  static constexpr size_t kAlignFloats = 1024;

  // `gradients` floats followed by `tail` floats in the buffer; `buckets` wanted (>= 1), fewer
  // when the gradients are too few for that many buckets of kMinBucketFloats.
  GradientBuckets(size_t gradients, size_t tail, int buckets);

  size_t size() const { return bounds_.size() - 1; }
  size_t begin(size_t i) const { return bounds_[i]; }
  size_t end(size_t i) const { return bounds_[i + 1]; }
  // What bucket i's allreduce sums in `buffer` (gradients + tail): its gradients and the `tail`
  // floats after them. The collectives cache their set-up per buffer, keyed by this span.
  std::span<float> data(std::span<float> buffer, size_t i) const {
    return buffer.subspan(begin(i), end(i) - begin(i) + tail_);
  }

  // Runs bucket i of `buffer` (gradients + tail): write(tail) fills its tail, reduce(span) sums
  // the bucket and its tail across ranks in place, read(tail) reads the summed tail; then the
  // lent floats are given back. Every rank calls it for the same buckets in the same order.
  template <typename Write, typename Reduce, typename Read>
  void run(std::span<float> buffer, size_t i, Write&& write, Reduce&& reduce, Read&& read) {
    const std::span<float> data = this->data(buffer, i);
    const std::span<float> tail = data.last(tail_);
    const bool lent = i + 1 < size();
    if (lent) saved_.assign(tail.begin(), tail.end());  // capacity reserved: no allocation
    write(tail);
    reduce(data);
    read(std::span<const float>(tail));
    if (lent) std::copy(saved_.begin(), saved_.end(), tail.begin());
  }

 private:
  size_t tail_;
  std::vector<size_t> bounds_;  // size() + 1 offsets, 0 .. gradients
  std::vector<float> saved_;
};

}  // namespace bpftrain::trainer::collective
