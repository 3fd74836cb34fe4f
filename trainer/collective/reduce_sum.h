// Element-wise float sum used by our own algorithms (ring, hierarchical). Compiled with -O3 so it
// vectorizes; the reduction order per element is fixed (dst = dst + src), never reassociated.
#pragma once

#include <cstddef>

namespace bpftrain::trainer::collective {

void sumInto(float* __restrict dst, const float* __restrict src, size_t count);

}  // namespace bpftrain::trainer::collective
