// Barrier and broadcast on bound buffers that wait for every send they make (see bound_sync.h).
#include "trainer/collective/bound_sync.h"

#include <gloo/context.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/pair.h>

namespace bpftrain::trainer::collective {

BoundBarrier::BoundBarrier(std::shared_ptr<gloo::Context> context) : context_(std::move(context)) {
  const int n = context_->size;
  in_.resize(size_t(n));
  send_.resize(size_t(n));
  recv_.resize(size_t(n));
  const int slot = context_->nextSlot();
  for (int p = 0; p < n; ++p) {
    if (p == context_->rank) continue;
    auto& pair = context_->getPair(p);
    recv_[size_t(p)] = pair->createRecvBuffer(slot, &in_[size_t(p)], sizeof(int32_t));
    send_[size_t(p)] = pair->createSendBuffer(slot, &out_, sizeof out_);
  }
}

BoundBarrier::~BoundBarrier() = default;

void BoundBarrier::run() {
  for (auto& s : send_)
    if (s) s->send();
  for (auto& r : recv_)
    if (r) r->waitRecv();
  for (auto& s : send_)
    if (s) s->waitSend();
}

BoundBroadcast::BoundBroadcast(std::shared_ptr<gloo::Context> context, uint8_t* data, size_t size,
                               int root)
    : context_(std::move(context)), root_(root) {
  const int n = context_->size;
  cts_in_.resize(size_t(n));
  data_.resize(size_t(n));
  cts_.resize(size_t(n));
  const int data_slot = context_->nextSlot();
  const int cts_slot = context_->nextSlot();
  if (context_->rank == root_) {
    for (int p = 0; p < n; ++p) {
      if (p == root_) continue;
      auto& pair = context_->getPair(p);
      cts_[size_t(p)] = pair->createRecvBuffer(cts_slot, &cts_in_[size_t(p)], sizeof(int32_t));
      data_[size_t(p)] = pair->createSendBuffer(data_slot, data, size);
    }
  } else {
    auto& pair = context_->getPair(root_);
    data_[size_t(root_)] = pair->createRecvBuffer(data_slot, data, size);
    cts_[size_t(root_)] = pair->createSendBuffer(cts_slot, &cts_out_, sizeof cts_out_);
  }
}

BoundBroadcast::~BoundBroadcast() = default;

void BoundBroadcast::run() {
  if (context_->rank == root_) {
    // A peer's clear-to-send says its previous receive is done with the buffer.
    for (size_t p = 0; p < data_.size(); ++p) {
      if (!data_[p]) continue;
      cts_[p]->waitRecv();
      data_[p]->send();
    }
    for (auto& d : data_)
      if (d) d->waitSend();
    return;
  }
  cts_[size_t(root_)]->send();
  data_[size_t(root_)]->waitRecv();
  cts_[size_t(root_)]->waitSend();
}

}  // namespace bpftrain::trainer::collective
