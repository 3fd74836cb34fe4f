// Flat float buffers for parameters, gradients and momentum. Each lives in its own anonymous
// mapping aligned to 2 MiB so that transparent huge pages (THP mode `madvise` here) can back it:
// one allreduce over one buffer touches few TLB entries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace bpftrain::trainer::model {

inline constexpr size_t kHugePageSize = size_t{2} << 20;

class HugeBuffer {
 public:
  HugeBuffer() = default;
  // Zero-filled. Throws std::runtime_error if the mapping fails. With `hugepages`, the range is
  // madvise(MADV_HUGEPAGE)d; a kernel that refuses is not an error (THP off), just fewer huge
  // pages.
  HugeBuffer(size_t count, bool hugepages);
  ~HugeBuffer();
  HugeBuffer(HugeBuffer&& other) noexcept;
  HugeBuffer& operator=(HugeBuffer&& other) noexcept;
  HugeBuffer(const HugeBuffer&) = delete;
  HugeBuffer& operator=(const HugeBuffer&) = delete;

  float* data() const { return data_; }
  size_t size() const { return count_; }
  std::span<float> span() const { return {data_, count_}; }
  // The 2 MiB-aligned region the floats live in (what membind and madvise act on).
  void* region() const { return data_; }
  size_t regionBytes() const { return region_bytes_; }
  bool hugepageAdvised() const { return advised_; }

 private:
  void release();
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  float* data_ = nullptr;
  size_t count_ = 0;
  size_t region_bytes_ = 0;
  bool advised_ = false;
};

// AnonHugePages of this process in bytes, from /proc/self/smaps_rollup; -1 if unreadable.
// Reads into a stack buffer: no allocation, so telemetry may call it periodically.
int64_t anonHugePagesBytes();
// The resident set (Rss) of this process in bytes, the same way; -1 if unreadable.
int64_t residentBytes();

// FNV-1a over the bytes of a float buffer: ranks print it so tests compare parameters bit for bit.
uint64_t hashFloats(std::span<const float> values);

}  // namespace bpftrain::trainer::model
