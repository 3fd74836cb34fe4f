// Ring allreduce on a region of an unbound buffer; also the leader stage of hierarchical.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "trainer/collective/allreduce_algorithm.h"
#include "trainer/collective/buffer_cache.h"

namespace gloo::transport {
class UnboundBuffer;
}

namespace bpftrain::trainer::collective {

class RingAllreduce final : public AllreduceAlgorithm {
 public:
  // Largest segment in flight; two are in flight per direction. 1 MiB keeps the scratch in cache
  // while amortising per-message overhead (measured in tools/bench.d/allreduce).
  static constexpr size_t kMaxSegmentElements = 256 * 1024;
  // Chunks up to this size travel as one segment.
  static constexpr size_t kSmallChunkElements = 16 * 1024;

  // world_ranks[i]: the world rank of context rank i, for error messages (empty: the same).
  RingAllreduce(std::shared_ptr<gloo::Context> context, uint64_t slot,
                std::vector<int> world_ranks = {});
  ~RingAllreduce() override;

  void run(std::span<float> data) override;
  // Allreduce elements [offset, offset + count) of buf (registered on this ring's context).
  void runRange(gloo::transport::UnboundBuffer& buf, size_t offset, size_t count);

  gloo::Context& context() { return *context_; }

 private:
  void runRangeImpl(gloo::transport::UnboundBuffer& buf, size_t offset, size_t count);

  std::shared_ptr<gloo::Context> context_;
  uint64_t slot_;
  std::vector<int> world_ranks_;
  std::vector<float> scratch_;  // two segments
  std::unique_ptr<gloo::transport::UnboundBuffer> scratch_buf_;
  BufferCache<gloo::transport::UnboundBuffer> buffers_{8};
};

}  // namespace bpftrain::trainer::collective
