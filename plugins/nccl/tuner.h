// The tuner half: one context per communicator, getCollInfo applying the decision in force.
// Every rank of a communicator makes the same sequence of tuner calls, so a decision names the
// call index it starts at and each rank switches at exactly that call; a decision that arrives
// after its call has passed is refused (late), since applying it would make this rank disagree
// with the ranks that switched on time. getCollInfo reads the DecisionBoard without blocking,
// allocates nothing, makes no system call and always returns success.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "plugins/nccl/decision_board.h"

namespace bpftrain::nccl_plugin {

struct TunerContext {
  std::atomic<bool> in_use{false};
  uint64_t comm_id = 0;  // 0 where NCCL does not say (tuner v3/v4)
  size_t nranks = 0, nnodes = 0;
  std::atomic<uint64_t> calls{0};  // tuner calls so far = index of the next call
  std::atomic<uint64_t> epoch{0};  // decision in force (0: none)
  std::atomic<uint64_t> late{0};
  std::atomic<uint64_t> unsupported{0};
  // Owned by the thread NCCL calls getCollInfo from (one per communicator at a time).
  uint64_t seen_version = ~uint64_t(0);
  uint64_t newest_epoch = 0;  // newest decision looked at, applied or not
  Decision pending{}, active{};
  bool has_pending = false, has_active = false;
};

class Tuner {
 public:
  static constexpr size_t kMaxContexts = 1024;

  explicit Tuner(const DecisionBoard& board) : board_(board) {}

  // Never fails: without a free context the communicator gets one that changes nothing.
  TunerContext* open(uint64_t comm_id, size_t nranks, size_t nnodes);
  void close(TunerContext* ctx);
  void getCollInfo(TunerContext* ctx, int coll_type, float* table, int num_algo, int num_proto,
                   int* n_channels);

  // For the agent's flush: every context in use.
  template <typename F>
  void forEach(F&& f) const {
    for (const TunerContext& c : contexts_)
      if (c.in_use.load(std::memory_order_acquire)) f(c);
  }
  uint64_t contextsRefused() const { return refused_.load(std::memory_order_relaxed); }
  // Over every communicator, closed ones included.
  uint64_t lateTotal() const { return late_.load(std::memory_order_relaxed); }
  uint64_t unsupportedTotal() const { return unsupported_.load(std::memory_order_relaxed); }

 private:
  const DecisionBoard& board_;
  std::array<TunerContext, kMaxContexts> contexts_;
  TunerContext overflow_;  // shared by communicators beyond kMaxContexts; never decides
  std::atomic<uint64_t> refused_{0};
  std::atomic<uint64_t> late_{0}, unsupported_{0};
};

}  // namespace bpftrain::nccl_plugin
