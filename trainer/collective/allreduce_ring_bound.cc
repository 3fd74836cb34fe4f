// The ring over Gloo's bound buffers (ibverbs): the segments and sums of allreduce_ring.cc, with
// every message passing through a fixed set of registered slots and a notification handing each
// slot back (see BoundRingAllreduce in allreduce_ring.h).
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "trainer/collective/allreduce_ring.h"
#include "trainer/collective/reduce_sum.h"
#include "trainer/collective/ring_layout.h"

namespace bpftrain::trainer::collective {

using ring::Layout;
using ring::mod;
using ring::Segment;

namespace {
constexpr size_t kSlotBytes = ring::kMaxSegmentElements * sizeof(float);
// Notifications in flight before the receiver waits for one to complete.
constexpr size_t kNotesInFlight = 2;
}  // namespace

BoundRingAllreduce::BoundRingAllreduce(std::shared_ptr<gloo::Context> context,
                                       std::vector<int> world_ranks)
    : context_(std::move(context)), world_ranks_(std::move(world_ranks)) {
  const int n = context_->size, r = context_->rank;
  if (n == 1) return;
  staging_.resize(kSlots * ring::kMaxSegmentElements);
  scratch_.resize(kSlots * ring::kMaxSegmentElements);
  // Slot numbers come from the context's counter: the same on every rank that constructs the
  // same objects in the same order. A send buffer writes to the peer's receive buffer of its slot.
  const int data_slot = context_->nextSlot();
  const int note_slot = context_->nextSlot();
  auto& left = context_->getPair((r + n - 1) % n);
  auto& right = context_->getPair((r + 1) % n);
  // Receive buffers first: creating one sends its memory region to the peer, whose first write
  // waits for it.
  from_left_ = left->createRecvBuffer(data_slot, scratch_.data(), scratch_.size() * sizeof(float));
  note_from_right_ = right->createRecvBuffer(note_slot, &note_in_, sizeof note_in_);
  to_right_ = right->createSendBuffer(data_slot, staging_.data(), staging_.size() * sizeof(float));
  note_to_left_ = left->createSendBuffer(note_slot, &note_out_, sizeof note_out_);
}

BoundRingAllreduce::~BoundRingAllreduce() {
  // After a failure Gloo's buffers may still count writes in flight, and their destructors
  // enforce that none are (an exception out of a destructor ends the process): leave them.
  if (failed_) {
    (void)to_right_.release();
    (void)from_left_.release();
    (void)note_to_left_.release();
    (void)note_from_right_.release();
  }
}

void BoundRingAllreduce::runRange(float* data, size_t count) {
  if (context_->size == 1 || count == 0) return;
  try {
    runImpl(data, count);
  } catch (const gloo::Exception& e) {
    failed_ = true;
    const int n = context_->size, r = context_->rank;
    auto world = [&](int i) {
      return std::to_string(world_ranks_.empty() ? i : world_ranks_[size_t(i)]);
    };
    throw std::runtime_error(
        std::string(e.what()) + " [ring over bound buffers: receiving from rank " +
        world((r + n - 1) % n) + ", sending to rank " + world((r + 1) % n) + "]");
  }
}

// Message j goes to staging and scratch slot j % kSlots. It may be written once the right
// neighbour has handed back message j - kSlots (its slot is free there) and our own write of it
// completed (the staging slot is free here).
void BoundRingAllreduce::send(const float* src, size_t count) {
  const size_t j = sent_;
  if (j >= kSlots) {
    for (; credits_ <= j - kSlots; ++credits_) note_from_right_->waitRecv();
    for (; send_done_ <= j - kSlots; ++send_done_) to_right_->waitSend();
  }
  const size_t offset = (j % kSlots) * kSlotBytes;
  std::memcpy(reinterpret_cast<char*>(staging_.data()) + offset, src, count * sizeof(float));
  to_right_->send(offset, count * sizeof(float), offset);
  ++sent_;
}

// Writes from the left arrive in order (one RC queue pair), so the next completion is the next
// message.
const float* BoundRingAllreduce::receive() {
  from_left_->waitRecv();
  return scratch_.data() + (received_++ % kSlots) * ring::kMaxSegmentElements;
}

// The message last received has been used: its slot may be written again.
void BoundRingAllreduce::release() {
  if (notes_sent_ - notes_done_ >= kNotesInFlight) {
    note_to_left_->waitSend();
    ++notes_done_;
  }
  note_to_left_->send(0, sizeof note_out_);
  ++notes_sent_;
}

// Every write completed, every message handed back by the right, every notification delivered:
// nothing is in flight between calls, so the buffers could be destroyed after any call.
void BoundRingAllreduce::finish() {
  for (; send_done_ < sent_; ++send_done_) to_right_->waitSend();
  for (; credits_ < sent_; ++credits_) note_from_right_->waitRecv();
  for (; notes_done_ < notes_sent_; ++notes_done_) note_to_left_->waitSend();
  sent_ = send_done_ = credits_ = received_ = notes_sent_ = notes_done_ = 0;
}

void BoundRingAllreduce::runImpl(float* base, size_t count) {
  const long n = context_->size;
  const long r = context_->rank;
  const Layout layout(count, static_cast<int>(n));
  const size_t k = layout.perChunk();
  const size_t iterations = static_cast<size_t>(n - 1) * k;

  // Reduce-scatter: at step s rank r sends chunk r-s and adds chunk r-s-1 from the left into its
  // own (own += incoming, as the TCP ring does).
  auto rsRecv = [&](size_t i) { return layout.segment(mod(r - long(i / k) - 1, n), i % k); };
  auto rsSend = [&](size_t i) { return layout.segment(mod(r - long(i / k), n), i % k); };
  auto reduceIncoming = [&](size_t i) {
    const Segment in = rsRecv(i);
    if (in.len == 0) return;
    sumInto(base + in.start, receive(), in.len);
    release();
  };
  for (size_t i = 0; i < iterations; ++i) {
    if (i > 0) reduceIncoming(i - 1);
    const Segment out = rsSend(i);
    if (out.len > 0) send(base + out.start, out.len);
  }
  reduceIncoming(iterations - 1);

  // Allgather: rank r owns chunk r+1; at step s it sends chunk r+1-s and receives chunk r-s. What
  // it forwards at iteration i arrived at iteration i-k and was copied out then.
  auto agRecv = [&](size_t i) { return layout.segment(mod(r - long(i / k), n), i % k); };
  auto agSend = [&](size_t i) { return layout.segment(mod(r + 1 - long(i / k), n), i % k); };
  for (size_t i = 0; i < iterations; ++i) {
    const Segment out = agSend(i);
    if (out.len > 0) send(base + out.start, out.len);
    const Segment in = agRecv(i);
    if (in.len > 0) {
      std::memcpy(base + in.start, receive(), in.len * sizeof(float));
      release();
    }
  }
  finish();
}

std::unique_ptr<AllreduceAlgorithm> makeBoundRingAllreduce(std::shared_ptr<gloo::Context> context) {
  return std::make_unique<BoundRingAllreduce>(std::move(context));
}

}  // namespace bpftrain::trainer::collective
