// Ring allreduce on a region of an unbound buffer; also the leader stage of hierarchical.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "trainer/collective/allreduce_algorithm.h"
#include "trainer/collective/buffer_cache.h"
#include "trainer/collective/ring_layout.h"

namespace gloo::transport {
class Buffer;
class UnboundBuffer;
}  // namespace gloo::transport

namespace bpftrain::trainer::collective {

class RingAllreduce final : public AllreduceAlgorithm {
 public:
  // Largest segment in flight; two are in flight per direction (ring_layout.h).
  static constexpr size_t kMaxSegmentElements = ring::kMaxSegmentElements;

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

// The same ring over Gloo's bound buffers, for transports without unbound ones (ibverbs). Every
// segment travels through a registered staging slot into the right neighbour's registered scratch
// slot (kSlots of each), and the receiver hands the slot back with a notification; so the ring
// runs on any region (the data, or the hierarchical stage's shared-memory result) with one pair of
// buffers per neighbour, made once. Gloo's ibverbs pair allows one send buffer per slot number
// and writes to the peer's registered region, whose layout the sender does not know: registering
// each caller's region would need both. The price is one copy per segment sent and one per
// allgather segment received (memory bandwidth, far above a NIC's on rxe). Same segments and sums
// as RingAllreduce: bit-identical on every rank and with the TCP ring.
class BoundRingAllreduce final : public AllreduceAlgorithm {
 public:
  // Scratch and staging slots per neighbour. With the notifications at most kSlots + 2 writes are
  // outstanding on a queue pair (2 ranks: one pair), under Gloo's 8 send work requests per pair.
  static constexpr size_t kSlots = 4;

  // Collective over `context`: every rank must construct it in the same order (Gloo slots).
  BoundRingAllreduce(std::shared_ptr<gloo::Context> context, std::vector<int> world_ranks = {});
  ~BoundRingAllreduce() override;

  void run(std::span<float> data) override { runRange(data.data(), data.size()); }
  // Allreduce data[0, count).
  void runRange(float* data, size_t count);

 private:
  void runImpl(float* data, size_t count);
  void send(const float* src, size_t count);
  const float* receive();
  void release();
  void finish();

  std::shared_ptr<gloo::Context> context_;
  std::vector<int> world_ranks_;
  std::vector<float> staging_;  // kSlots segments, sent to the right
  std::vector<float> scratch_;  // kSlots segments, written by the left
  int32_t note_out_ = 0, note_in_ = 0;
  std::unique_ptr<gloo::transport::Buffer> to_right_, from_left_, note_to_left_, note_from_right_;
  // Per call (each call ends with every write completed and every slot handed back).
  size_t sent_ = 0, send_done_ = 0, credits_ = 0, received_ = 0, notes_sent_ = 0, notes_done_ = 0;
  bool failed_ = false;
};

}  // namespace bpftrain::trainer::collective
