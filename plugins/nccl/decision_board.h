// Where verified tuner decisions wait for getCollInfo: one writer (the agent's receive thread)
// publishes, any number of NCCL threads read without blocking. Each slot is a seqlock; a reader
// that sees a write in progress reports kTorn and simply looks again at its next call, because a
// decision applies from a call index chosen well ahead of every rank (plugins/nccl/tuner.h).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

namespace bpftrain::nccl_plugin {

inline constexpr uint8_t kAny = 0xff;

struct Decision {
  uint64_t epoch = 0;
  uint64_t comm_id = 0;     // 0: every communicator
  uint64_t start_call = 0;  // first tuner call index (per communicator) it applies to
  uint8_t collective = kAny;
  uint8_t algorithm = kAny;  // kAny: NCCL's own choice
  uint8_t protocol = kAny;   // kAny: the algorithm's cheapest supported protocol
  uint8_t channels = 0;      // 0: NCCL's choice
};

class DecisionBoard {
 public:
  enum class Read { kNone, kFound, kTorn };

  // Writer only. Replaces the slot holding d.comm_id, else takes a free or the oldest slot.
  void publish(const Decision& d);
  // Changes whenever publish() ran; readers compare it with the value they last read.
  uint64_t version() const { return version_.load(std::memory_order_acquire); }
  // The newest decision for `comm_id` or for every communicator (comm 0).
  Read find(uint64_t comm_id, Decision& out) const;
  void clear();  // writer only (tests)

 private:
  static constexpr size_t kSlots = 32;
  struct Slot {
    std::atomic<uint32_t> seq{0};  // odd while written
    std::atomic<uint64_t> epoch{0};
    std::atomic<uint64_t> comm_id{0};
    std::atomic<uint64_t> start_call{0};
    std::atomic<uint32_t> packed{0};  // collective, algorithm, protocol, channels
  };
  std::array<Slot, kSlots> slots_;
  std::atomic<uint64_t> version_{0};
};

}  // namespace bpftrain::nccl_plugin
