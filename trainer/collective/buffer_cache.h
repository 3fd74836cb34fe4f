// A small fixed-capacity LRU keyed by (pointer, length). Gloo binds transport buffers (and the old
// algorithm classes) to a pointer, so we create them once per user buffer and reuse them: a
// training loop that passes the same gradient buffer every step allocates nothing after the first
// step. Creation happens in the same call order on every rank, which keeps Gloo's slot numbers
// matched; the contract is that all ranks pass the same sequence of buffers (same lengths, same
// reuse).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace bpftrain::trainer::collective {

template <typename T>
class BufferCache {
 public:
  explicit BufferCache(size_t capacity) : capacity_(capacity) { entries_.reserve(capacity); }

  // Returns the cached object for (ptr, len), creating it with make() on a miss and evicting the
  // least recently used entry when full.
  template <typename Make>
  T& get(const void* ptr, size_t len, Make&& make) {
    ++clock_;
    for (auto& e : entries_) {
      if (e.ptr == ptr && e.len == len) {
        e.used = clock_;
        return *e.value;
      }
    }
    ++misses_;
    if (entries_.size() == capacity_) {
      size_t victim = 0;
      for (size_t i = 1; i < entries_.size(); ++i)
        if (entries_[i].used < entries_[victim].used) victim = i;
      // Destroy the old object before making the new one: the old one may hold large buffers.
      entries_[victim].value.reset();
      entries_[victim] = Entry{ptr, len, clock_, make()};
      return *entries_[victim].value;
    }
    entries_.push_back(Entry{ptr, len, clock_, make()});
    return *entries_.back().value;
  }

  void clear() { entries_.clear(); }
  uint64_t misses() const { return misses_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    const void* ptr;
    size_t len;
    uint64_t used;
    std::unique_ptr<T> value;
  };
  size_t capacity_;
  uint64_t clock_ = 0;
  uint64_t misses_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace bpftrain::trainer::collective
