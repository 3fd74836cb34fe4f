#include "trainer/collective/reduce_sum.h"

namespace bpftrain::trainer::collective {

void sumInto(float* __restrict dst, const float* __restrict src, size_t count) {
  for (size_t i = 0; i < count; ++i) dst[i] += src[i];
}

}  // namespace bpftrain::trainer::collective
