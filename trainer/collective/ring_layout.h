// How the ring splits a region into chunks (one per rank) and segments (the messages), shared by
// the ring over unbound buffers (TCP) and over bound buffers (ibverbs): both form every sum in the
// same order, so the two transports give the same bits.
#pragma once

#include <algorithm>
#include <cstddef>

namespace bpftrain::trainer::collective::ring {

// Largest segment in flight. 1 MiB keeps the scratch in cache while amortising per-message
// overhead (measured in tools/bench.d/allreduce).
inline constexpr size_t kMaxSegmentElements = 256 * 1024;
// Chunks up to this size travel as one segment.
inline constexpr size_t kSmallChunkElements = 16 * 1024;

struct Segment {
  size_t start;  // element index relative to the region
  size_t len;
};

class Layout {
 public:
  Layout(size_t count, int world) : count_(count) {
    const size_t n = static_cast<size_t>(world);
    // At least two segments per chunk so communication overlaps the sums, except for small
    // chunks, where each extra message costs more latency than the overlap saves.
    per_chunk_ =
        std::max<size_t>(2, (count + n * kMaxSegmentElements - 1) / (n * kMaxSegmentElements));
    if (count <= n * kSmallChunkElements) per_chunk_ = 1;
    seg_ = std::max<size_t>(1, (count + n * per_chunk_ - 1) / (n * per_chunk_));
  }
  size_t perChunk() const { return per_chunk_; }
  size_t segmentElements() const { return seg_; }
  Segment segment(size_t chunk, size_t j) const {
    const size_t g = chunk * per_chunk_ + j;
    const size_t begin = std::min(g * seg_, count_);
    const size_t end = std::min(begin + seg_, count_);
    return {begin, end - begin};
  }

 private:
  size_t count_;
  size_t per_chunk_;
  size_t seg_;
};

inline size_t mod(long a, long n) { return static_cast<size_t>(((a % n) + n) % n); }

}  // namespace bpftrain::trainer::collective::ring
