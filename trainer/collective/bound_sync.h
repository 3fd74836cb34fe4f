// Barrier and broadcast on Gloo's bound buffers, for the ibverbs transport. Gloo's own
// BarrierAllToAll and BroadcastOneToAll never wait for some of their sends to complete (every
// barrier send; a receiver's clear-to-send), and an ibverbs buffer destroyed with a send in
// flight aborts the process ("sendPending_ == 0" enforce, seen at the end of a run with 5 ms of
// netem delay on the rxe link). These are the same exchanges, each ending with its sends
// completed, so the buffers can be destroyed after any call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace gloo {
class Context;
namespace transport {
class Buffer;
}
}  // namespace gloo

namespace bpftrain::trainer::collective {

class BoundBarrier {
 public:
  // Collective over `context`: every rank constructs it in the same order (Gloo slots).
  explicit BoundBarrier(std::shared_ptr<gloo::Context> context);
  ~BoundBarrier();
  void run();

 private:
  std::shared_ptr<gloo::Context> context_;
  int32_t out_ = 0;
  std::vector<int32_t> in_;
  std::vector<std::unique_ptr<gloo::transport::Buffer>> send_, recv_;  // per peer
};

class BoundBroadcast {
 public:
  // `data` is bound: every run() sends (root) or receives `size` bytes there.
  BoundBroadcast(std::shared_ptr<gloo::Context> context, uint8_t* data, size_t size, int root);
  ~BoundBroadcast();
  void run();

 private:
  std::shared_ptr<gloo::Context> context_;
  int root_;
  int32_t cts_out_ = 0;
  std::vector<int32_t> cts_in_;
  // Root: data sends and clear-to-send receives per peer. Others: [root] only, the reverse.
  std::vector<std::unique_ptr<gloo::transport::Buffer>> data_, cts_;
};

}  // namespace bpftrain::trainer::collective
