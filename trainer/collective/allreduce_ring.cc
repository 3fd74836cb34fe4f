// Ring allreduce: reduce-scatter then allgather around rank -> rank+1, each chunk split into
// segments so that one segment is on the wire while the previous one is being summed.
// Bit-identical on every rank: each element is summed once, in ring order, on the rank that owns
// its chunk, and every other rank receives a copy of that sum.
#include "trainer/collective/allreduce_ring.h"

#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "trainer/collective/reduce_sum.h"
#include "trainer/collective/ring_layout.h"

namespace bpftrain::trainer::collective {

using ring::Layout;
using ring::mod;
using ring::Segment;

RingAllreduce::RingAllreduce(std::shared_ptr<gloo::Context> context, uint64_t slot,
                             std::vector<int> world_ranks)
    : context_(std::move(context)), slot_(slot), world_ranks_(std::move(world_ranks)) {
  scratch_.resize(2 * kMaxSegmentElements);
  scratch_buf_ = context_->createUnboundBuffer(scratch_.data(), scratch_.size() * sizeof(float));
}

RingAllreduce::~RingAllreduce() = default;

void RingAllreduce::run(std::span<float> data) {
  if (context_->size == 1 || data.empty()) return;
  auto& buf = buffers_.get(data.data(), data.size(), [&] {
    return context_->createUnboundBuffer(data.data(), data.size_bytes());
  });
  runRange(buf, 0, data.size());
}

void RingAllreduce::runRange(gloo::transport::UnboundBuffer& buf, size_t offset, size_t count) {
  try {
    runRangeImpl(buf, offset, count);
  } catch (const gloo::Exception& e) {
    // Name the neighbours: a closed connection or a timeout here means one of them died or hung.
    const int n = context_->size, r = context_->rank;
    auto world = [&](int i) {
      return std::to_string(world_ranks_.empty() ? i : world_ranks_[size_t(i)]);
    };
    throw std::runtime_error(std::string(e.what()) + " [ring: receiving from rank " +
                             world((r + n - 1) % n) + ", sending to rank " + world((r + 1) % n) +
                             "]");
  }
}

void RingAllreduce::runRangeImpl(gloo::transport::UnboundBuffer& buf, size_t offset, size_t count) {
  const long n = context_->size;
  const long r = context_->rank;
  if (n == 1 || count == 0) return;
  const int right = static_cast<int>((r + 1) % n);
  const int left = static_cast<int>((r + n - 1) % n);
  const auto timeout = context_->getTimeout();
  const Layout layout(count, static_cast<int>(n));
  const size_t k = layout.perChunk();
  const size_t seg_bytes = layout.segmentElements() * sizeof(float);
  const size_t steps = static_cast<size_t>(n - 1);
  const size_t iterations = steps * k;
  float* base = static_cast<float*>(buf.ptr) + offset;
  const size_t base_bytes = offset * sizeof(float);

  size_t pending_sends = 0;
  auto throttleSends = [&](size_t limit) {
    while (pending_sends > limit) {
      buf.waitSend(timeout);
      --pending_sends;
    }
  };

  // Receives are posted as early as possible: Gloo then tells the sender "receive ready" before it
  // sends, and the sender writes straight from its thread instead of a round trip through both
  // transport threads. Allgather receives use their own slot so they can be posted up front.
  const uint64_t ag_slot = slot_ + 1;
  auto agRecv = [&](size_t i) { return layout.segment(mod(r - long(i / k), n), i % k); };
  auto agSend = [&](size_t i) { return layout.segment(mod(r + 1 - long(i / k), n), i % k); };
  // Safe to land allgather data in buf before this rank's reduce-scatter ends: chunk r-s only
  // arrives after its sum went around the whole ring, i.e. after our raw chunk r-s was received.
  for (size_t i = 0; i < iterations; ++i) {
    const Segment in = agRecv(i);
    if (in.len > 0)
      buf.recv(left, ag_slot, base_bytes + in.start * sizeof(float), in.len * sizeof(float));
  }

  // Reduce-scatter: at step s rank r sends chunk r-s and receives chunk r-s-1, adding it to its
  // own. The scratch holds `slots` segments, so that many receives are in flight.
  const size_t seg_elems = layout.segmentElements();
  const size_t slots = std::min(iterations, std::max<size_t>(2, scratch_.size() / seg_elems));
  auto rsRecv = [&](size_t i) { return layout.segment(mod(r - long(i / k) - 1, n), i % k); };
  auto rsSend = [&](size_t i) { return layout.segment(mod(r - long(i / k), n), i % k); };
  size_t posted = 0;
  auto postRecv = [&] {
    const Segment in = rsRecv(posted);
    if (in.len > 0)
      scratch_buf_->recv(left, slot_, (posted % slots) * seg_bytes, in.len * sizeof(float));
    ++posted;
  };
  auto finishRecv = [&](size_t i) {
    const Segment seg = rsRecv(i);
    if (seg.len > 0) {
      scratch_buf_->waitRecv(timeout);
      sumInto(base + seg.start, scratch_.data() + (i % slots) * seg_elems, seg.len);
    }
    if (posted < iterations) postRecv();  // reuses the slot just summed
  };
  while (posted < slots) postRecv();
  for (size_t i = 0; i < iterations; ++i) {
    if (i > 0) finishRecv(i - 1);
    const Segment out = rsSend(i);
    if (out.len > 0) {
      buf.send(right, slot_, base_bytes + out.start * sizeof(float), out.len * sizeof(float));
      ++pending_sends;
      throttleSends(2);
    }
  }
  finishRecv(iterations - 1);
  throttleSends(0);

  // Allgather: rank r now owns chunk r+1; at step s it sends chunk r+1-s and receives chunk r-s.
  size_t waited = 0;  // iterations whose receive has completed, in order
  auto waitRecvsThrough = [&](size_t i) {
    for (; waited <= i; ++waited)
      if (agRecv(waited).len > 0) buf.waitRecv(timeout);
  };
  for (size_t i = 0; i < iterations; ++i) {
    const Segment out = agSend(i);
    if (i >= k) waitRecvsThrough(i - k);  // forwarding what arrived one step ago
    if (out.len > 0) {
      buf.send(right, ag_slot, base_bytes + out.start * sizeof(float), out.len * sizeof(float));
      ++pending_sends;
      throttleSends(2);
    }
  }
  if (iterations > 0) waitRecvsThrough(iterations - 1);
  throttleSends(0);
}

std::unique_ptr<AllreduceAlgorithm> makeRingAllreduce(std::shared_ptr<gloo::Context> context) {
  return std::make_unique<RingAllreduce>(std::move(context), /*slot=*/0xB7000001ull << 24);
}

}  // namespace bpftrain::trainer::collective
