// Gloo's AllreduceBcube: groups of `base` ranks reduce-scatter then allgather, log_base(n) steps.
// Every element's sum is formed on one rank (peers added in a fixed order) and copied to the rest,
// so results are bit-identical across ranks.
#include <gloo/allreduce_bcube.h>

#include <algorithm>
#include <cstring>

#include "trainer/collective/allreduce_algorithm.h"
#include "trainer/collective/buffer_cache.h"

namespace bpftrain::trainer::collective {

int bcubeBase(int world) {
  for (int b = 2; b < world; ++b) {
    int p = 1;
    while (p < world) p *= b;
    if (p == world) return b;
  }
  return std::max(world, 2);
}

namespace {

class BcubeAllreduce final : public AllreduceAlgorithm {
 public:
  explicit BcubeAllreduce(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {
    // Gloo's bcube assigns at least one element per rank and step and overruns buffers shorter
    // than that; short buffers go through a zero-padded staging copy (zeros do not change sums).
    min_elements_ = 1;
    for (int n = context_->size; n > 1; n /= context_->base) min_elements_ *= context_->base;
    min_elements_ *= context_->size;
    staging_.resize(min_elements_);
  }

  // Both instances of the ping-pong pair, built: Gloo's constructor registers the buffers with
  // each peer, but only reserves its receive buffers, so the first run of each still faults
  // them in (RankRunner::warmTopologies has the figures).
  void warm(std::span<float> data) override {
    if (context_->size == 1 || data.empty()) return;
    if (data.size() < min_elements_)
      pingPongFor(staging_.data(), staging_.size());
    else
      pingPongFor(data.data(), data.size());
  }

  void run(std::span<float> data) override {
    if (context_->size == 1 || data.empty()) return;
    if (data.size() < min_elements_) {
      std::fill(staging_.begin(), staging_.end(), 0.0f);
      std::memcpy(staging_.data(), data.data(), data.size_bytes());
      runBound(staging_.data(), staging_.size());
      std::memcpy(data.data(), staging_.data(), data.size_bytes());
      return;
    }
    runBound(data.data(), data.size());
  }

 private:
  // Gloo's bcube only waits for its first-step peers' "done with your data" notifications before
  // returning, so back to back on one instance a fast rank's next reduce-scatter can land in a
  // later-step peer's receive buffer while that peer still copies out of it (seen as rare
  // last-bit differences between ranks). Alternating two instances per buffer gives every
  // receive buffer a full allreduce of slack, which the ring of dependencies guarantees.
  struct PingPong {
    std::unique_ptr<gloo::AllreduceBcube<float>> instance[2];
    int next = 0;
  };

  void runBound(float* ptr, size_t count) {
    PingPong& pp = pingPongFor(ptr, count);
    pp.instance[pp.next]->run();
    pp.next ^= 1;
  }

  PingPong& pingPongFor(float* ptr, size_t count) {
    return cache_.get(ptr, count, [&] {
      auto p = std::make_unique<PingPong>();
      for (auto& i : p->instance)
        i = std::make_unique<gloo::AllreduceBcube<float>>(context_, std::vector<float*>{ptr},
                                                          static_cast<int>(count));
      return p;
    });
  }

  std::shared_ptr<gloo::Context> context_;
  size_t min_elements_ = 0;
  std::vector<float> staging_;
  // One entry per gradient bucket (--allreduce-buckets, at most 8), so none is rebuilt per step.
  BufferCache<PingPong> cache_{8};
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeBcubeAllreduce(std::shared_ptr<gloo::Context> context) {
  return std::make_unique<BcubeAllreduce>(std::move(context));
}

}  // namespace bpftrain::trainer::collective
