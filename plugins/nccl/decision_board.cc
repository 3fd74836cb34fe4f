#include "plugins/nccl/decision_board.h"

namespace bpftrain::nccl_plugin {

void DecisionBoard::publish(const Decision& d) {
  Slot* target = nullptr;
  for (Slot& s : slots_)
    if (s.epoch.load(std::memory_order_relaxed) != 0 &&
        s.comm_id.load(std::memory_order_relaxed) == d.comm_id)
      target = &s;
  if (target == nullptr) {
    target = &slots_[0];
    for (Slot& s : slots_)
      if (s.epoch.load(std::memory_order_relaxed) < target->epoch.load(std::memory_order_relaxed))
        target = &s;
  }
  // Fence-free seqlock (no atomic_thread_fence, which TSan cannot check): the odd sequence is
  // ordered before the field stores by their release, and a reader's acquire load of any new
  // field value then sees the odd (or a later) sequence on its second look.
  uint32_t seq = target->seq.load(std::memory_order_relaxed);
  target->seq.store(seq + 1, std::memory_order_relaxed);
  target->epoch.store(d.epoch, std::memory_order_release);
  target->comm_id.store(d.comm_id, std::memory_order_release);
  target->start_call.store(d.start_call, std::memory_order_release);
  target->packed.store(uint32_t(d.collective) | uint32_t(d.algorithm) << 8 |
                           uint32_t(d.protocol) << 16 | uint32_t(d.channels) << 24,
                       std::memory_order_release);
  target->seq.store(seq + 2, std::memory_order_release);
  version_.fetch_add(1, std::memory_order_release);
}

DecisionBoard::Read DecisionBoard::find(uint64_t comm_id, Decision& out) const {
  Read result = Read::kNone;
  for (const Slot& s : slots_) {
    uint32_t before = s.seq.load(std::memory_order_acquire);
    if (before & 1) return Read::kTorn;
    Decision d;
    d.epoch = s.epoch.load(std::memory_order_acquire);
    d.comm_id = s.comm_id.load(std::memory_order_acquire);
    d.start_call = s.start_call.load(std::memory_order_acquire);
    uint32_t packed = s.packed.load(std::memory_order_acquire);
    if (s.seq.load(std::memory_order_relaxed) != before) return Read::kTorn;
    if (d.epoch == 0 || (d.comm_id != 0 && d.comm_id != comm_id)) continue;
    if (result == Read::kFound && d.epoch <= out.epoch) continue;
    d.collective = uint8_t(packed);
    d.algorithm = uint8_t(packed >> 8);
    d.protocol = uint8_t(packed >> 16);
    d.channels = uint8_t(packed >> 24);
    out = d;
    result = Read::kFound;
  }
  return result;
}

void DecisionBoard::clear() {
  for (Slot& s : slots_) {
    uint32_t seq = s.seq.load(std::memory_order_relaxed);
    s.seq.store(seq + 1, std::memory_order_relaxed);
    s.epoch.store(0, std::memory_order_release);
    s.seq.store(seq + 2, std::memory_order_release);
  }
  version_.fetch_add(1, std::memory_order_release);
}

}  // namespace bpftrain::nccl_plugin
