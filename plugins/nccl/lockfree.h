// The two lock-free containers the profiler callbacks use: a fixed pool of records (a Treiber
// free list with an ABA tag; untouched records are handed out by a bump index) and a bounded
// multi-producer queue (Vyukov's, one sequence number per cell). Neither allocates after
// construction, takes a lock or makes a system call; both fail (return false/nullptr) when full.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>

namespace bpftrain::nccl_plugin {

template <typename T, size_t N>
class RecordPool {
  static_assert(N < (1u << 31));

 public:
  T* alloc() {
    uint64_t head = head_.load(std::memory_order_acquire);
    while (uint32_t top = uint32_t(head)) {
      uint64_t next = ((head >> 32) + 1) << 32 | next_[top - 1].load(std::memory_order_relaxed);
      if (head_.compare_exchange_weak(head, next, std::memory_order_acq_rel))
        return &items_[top - 1];
    }
    uint32_t fresh = bump_.load(std::memory_order_relaxed);
    while (fresh < N) {
      if (bump_.compare_exchange_weak(fresh, fresh + 1, std::memory_order_relaxed))
        return &items_[fresh];
    }
    return nullptr;
  }
  void free(T* item) {
    const uint32_t index = uint32_t(item - items_.data());
    uint64_t head = head_.load(std::memory_order_relaxed);
    uint64_t next;
    do {
      next_[index].store(uint32_t(head), std::memory_order_relaxed);
      next = ((head >> 32) + 1) << 32 | (index + 1);
    } while (!head_.compare_exchange_weak(head, next, std::memory_order_acq_rel));
  }
  // The record containing address `p`, and p's offset inside it; nullopt outside the pool.
  std::optional<std::pair<size_t, size_t>> locate(const void* p) const {
    auto a = reinterpret_cast<uintptr_t>(p), base = reinterpret_cast<uintptr_t>(items_.data());
    if (a < base || a >= base + sizeof(items_)) return std::nullopt;
    return std::pair<size_t, size_t>{(a - base) / sizeof(T), (a - base) % sizeof(T)};
  }
  T& at(size_t i) { return items_[i]; }
  size_t index(const T* item) const { return size_t(item - items_.data()); }

 private:
  std::array<T, N> items_{};
  std::array<std::atomic<uint32_t>, N> next_{};
  std::atomic<uint64_t> head_{0};  // ABA tag << 32 | (index + 1); 0: empty
  std::atomic<uint32_t> bump_{0};
};

template <typename T, size_t N>
class BoundedQueue {
  static_assert((N & (N - 1)) == 0, "power of two");

 public:
  BoundedQueue() {
    for (size_t i = 0; i < N; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }
  bool push(const T& v) {
    size_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells_[pos & (N - 1)];
      size_t seq = c.seq.load(std::memory_order_acquire);
      intptr_t diff = intptr_t(seq) - intptr_t(pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.value = v;
          c.seq.store(pos + 1, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;  // full
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }
  // Single consumer (the agent thread).
  bool pop(T& out) {
    size_t pos = head_.load(std::memory_order_relaxed);
    Cell& c = cells_[pos & (N - 1)];
    size_t seq = c.seq.load(std::memory_order_acquire);
    if (intptr_t(seq) - intptr_t(pos + 1) < 0) return false;
    out = c.value;
    c.seq.store(pos + N, std::memory_order_release);
    head_.store(pos + 1, std::memory_order_relaxed);
    return true;
  }

 private:
  struct Cell {
    std::atomic<size_t> seq;
    T value;
  };
  std::array<Cell, N> cells_;
  alignas(64) std::atomic<size_t> tail_{0};
  alignas(64) std::atomic<size_t> head_{0};
};

}  // namespace bpftrain::nccl_plugin
