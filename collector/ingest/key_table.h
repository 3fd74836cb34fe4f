// A flat open-addressing map from short byte keys (StatsD "type|name|tags") to a small value,
// for one ingest thread. Power-of-two capacity (a mask, not a division), the key's hash kept in
// the slot, keys in one arena: a hit costs one hash over the key and usually one memcmp, and
// allocates nothing. Inserts allocate (amortized) only when a new series is seen.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace bpftrain::collector::ingest {

inline uint64_t hashKey(std::string_view s) {
  // 8 bytes per multiply-xorshift round; enough spread for a linear-probing table.
  constexpr uint64_t kMul = 0x9E3779B97F4A7C15ull;
  uint64_t h = 0x243F6A8885A308D3ull ^ (s.size() * kMul);
  const char* p = s.data();
  size_t n = s.size();
  while (n >= 8) {
    uint64_t w;
    std::memcpy(&w, p, 8);
    h = (h ^ w) * kMul;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  uint64_t w = 0;
  std::memcpy(&w, p, n);
  h = (h ^ w) * kMul;
  h ^= h >> 32;
  return h;
}

template <typename Value>
class KeyTable {
 public:
  explicit KeyTable(size_t initial_capacity = 1024) { reset(initial_capacity); }

  Value* find(std::string_view key) { return findHashed(key, hashKey(key)); }

  Value* findHashed(std::string_view key, uint64_t h) {
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.len == kEmpty) return nullptr;
      if (s.hash == h && s.len == key.size() &&
          std::memcmp(arena_.data() + s.offset, key.data(), key.size()) == 0)
        return &values_[i];
    }
  }

  // Inserts a key that find() did not find.
  Value& insert(std::string_view key, uint64_t h, const Value& v) {
    if ((size_ + 1) * 2 > slots_.size()) grow();
    size_t i = h & mask_;
    while (slots_[i].len != kEmpty) i = (i + 1) & mask_;
    slots_[i] = Slot{h, uint32_t(arena_.size()), uint32_t(key.size())};
    arena_.append(key);
    values_[i] = v;
    ++size_;
    return values_[i];
  }

  size_t size() const { return size_; }
  void clear() { reset(1024); }

 private:
  static constexpr uint32_t kEmpty = ~uint32_t{0};
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0;
    uint32_t len = kEmpty;
  };

  void reset(size_t capacity) {
    size_t c = 16;
    while (c < capacity) c *= 2;
    slots_.assign(c, Slot{});
    values_.assign(c, Value{});
    mask_ = c - 1;
    size_ = 0;
    arena_.clear();
  }

  void grow() {
    std::vector<Slot> old_slots = std::move(slots_);
    std::vector<Value> old_values = std::move(values_);
    size_t c = old_slots.size() * 2;
    slots_.assign(c, Slot{});
    values_.assign(c, Value{});
    mask_ = c - 1;
    for (size_t j = 0; j < old_slots.size(); ++j) {
      if (old_slots[j].len == kEmpty) continue;
      size_t i = old_slots[j].hash & mask_;
      while (slots_[i].len != kEmpty) i = (i + 1) & mask_;
      slots_[i] = old_slots[j];
      values_[i] = old_values[j];
    }
  }

  std::vector<Slot> slots_;
  std::vector<Value> values_;
  std::string arena_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace bpftrain::collector::ingest
