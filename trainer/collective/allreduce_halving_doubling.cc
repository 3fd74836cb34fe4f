// Gloo's AllreduceHalvingDoubling: log2(n) steps of recursive halving (reduce-scatter) and doubling
// (allgather); non-powers of two are split into binary blocks. Each element's sum is formed on one
// rank and copied to the others, so results are bit-identical across ranks.
#include <gloo/allreduce_halving_doubling.h>

#include "trainer/collective/allreduce_algorithm.h"
#include "trainer/collective/buffer_cache.h"

namespace bpftrain::trainer::collective {
namespace {

class HalvingDoublingAllreduce final : public AllreduceAlgorithm {
 public:
  explicit HalvingDoublingAllreduce(std::shared_ptr<gloo::Context> context)
      : context_(std::move(context)) {}

  void run(std::span<float> data) override {
    if (context_->size == 1 || data.empty()) return;
    algorithmFor(data).run();
  }

  // Gloo's constructor does all the per-buffer set-up (the receive buffer, zeroed, and the send
  // and receive buffers registered with each peer); its run() only moves data.
  void warm(std::span<float> data) override {
    if (context_->size == 1 || data.empty()) return;
    algorithmFor(data);
  }

 private:
  // The Gloo class binds the pointer and allocates a receive buffer the size of the data, so it
  // is built once per buffer and kept (a few buffers at most).
  gloo::AllreduceHalvingDoubling<float>& algorithmFor(std::span<float> data) {
    return cache_.get(data.data(), data.size(), [&] {
      return std::make_unique<gloo::AllreduceHalvingDoubling<float>>(
          context_, std::vector<float*>{data.data()}, static_cast<int>(data.size()));
    });
  }

  std::shared_ptr<gloo::Context> context_;
  // One entry per gradient bucket (--allreduce-buckets, at most 8), so none is rebuilt per step.
  BufferCache<gloo::AllreduceHalvingDoubling<float>> cache_{8};
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeHalvingDoublingAllreduce(
    std::shared_ptr<gloo::Context> context) {
  return std::make_unique<HalvingDoublingAllreduce>(std::move(context));
}

}  // namespace bpftrain::trainer::collective
