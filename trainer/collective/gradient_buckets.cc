#include "trainer/collective/gradient_buckets.h"

#include <algorithm>

namespace bpftrain::trainer::collective {

GradientBuckets::GradientBuckets(size_t gradients, size_t tail, int buckets) : tail_(tail) {
  const size_t most = std::max<size_t>(1, gradients / std::max(kMinBucketFloats, tail));
  const size_t n = std::clamp<size_t>(size_t(std::max(buckets, 1)), 1, most);
  // Equal buckets on page boundaries; the last takes what is left.
  const size_t per = (gradients / n + kAlignFloats - 1) / kAlignFloats * kAlignFloats;
  bounds_.push_back(0);
  for (size_t i = 1; i < n && i * per < gradients; ++i) bounds_.push_back(i * per);
  bounds_.push_back(gradients);
  saved_.reserve(tail);
}

}  // namespace bpftrain::trainer::collective
