// A DDSketch-style mergeable quantile sketch with a relative-error guarantee: every quantile it
// returns is within `relative_error` (default 1%) of the exact sample quantile, for positive,
// negative and zero values, and two sketches merge into exactly the sketch of the union.
// Values map to bins by a logarithmic index (gamma = (1+a)/(1-a)); each sign has a dense store
// bounded to `max_bins` bins that folds its lowest-magnitude bins together when the range grows
// past the bound (accuracy is kept for the large magnitudes that matter for tail latency).
// add() allocates only when a value falls outside the range the store has already sized, and
// clear() keeps capacity, so a reused sketch stops allocating once it has seen its range.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace bpftrain::collector::window {

inline constexpr double kDefaultRelativeError = 0.01;
inline constexpr uint32_t kDefaultMaxBins = 2048;  // per sign; gamma^2048 ~ 6e17 at 1%

// One sign's bins: a dense array of counts covering [offset_, offset_ + bins_.size()). Counts are
// 32-bit (saturating; a step never holds 2^32 samples in one bin), which halves window memory.
class BinStore {
 public:
  void add(int32_t index, uint64_t n, uint32_t max_bins);
  void merge(const BinStore& other, uint32_t max_bins);
  void clear();  // zeroes counts, keeps capacity

  uint64_t total() const { return total_; }
  bool empty() const { return total_ == 0; }
  int32_t lowest() const { return lo_; }   // valid when !empty()
  int32_t highest() const { return hi_; }  // valid when !empty()
  uint64_t at(int32_t index) const {
    int64_t i = int64_t(index) - offset_;
    return i >= 0 && i < int64_t(bins_.size()) ? bins_[size_t(i)] : 0;
  }
  bool collapsed() const { return collapsed_; }
  size_t memoryBytes() const { return bins_.capacity() * sizeof(uint32_t); }
  bool operator==(const BinStore& other) const;

 private:
  void cover(int32_t lo, int32_t hi, uint32_t max_bins);

  // Returns what the bin took: a saturated bin drops the rest, and total_ must count only what
  // the bins hold (a hostile serialized sketch can fold more than 2^32 into one bin).
  uint64_t bump(int32_t index, uint64_t n) {
    uint32_t& b = bins_[size_t(index - offset_)];
    const uint64_t v = uint64_t(b) + n;
    const uint32_t before = b;
    b = v > UINT32_MAX ? UINT32_MAX : uint32_t(v);
    return b - before;
  }

  std::vector<uint32_t> bins_;
  int32_t offset_ = 0;
  int32_t lo_ = 0, hi_ = -1;  // occupied index range, inclusive
  uint64_t total_ = 0;
  bool collapsed_ = false;
};

class Sketch {
 public:
  explicit Sketch(double relative_error = kDefaultRelativeError,
                  uint32_t max_bins = kDefaultMaxBins);

  // Adds n occurrences of v; false (and nothing added) when v is NaN or infinite.
  bool add(double v, uint64_t n = 1);
  // Adds other's bins; false when the two sketches use different relative errors.
  bool merge(const Sketch& other);
  void clear();

  // Value at quantile q in [0, 1] (the sample of rank floor(q * (count - 1))), within the
  // relative error; NaN when empty.
  double quantile(double q) const;
  uint64_t count() const { return zero_count_ + positive_.total() + negative_.total(); }
  bool empty() const { return count() == 0; }
  double relativeError() const { return relative_error_; }
  uint32_t maxBins() const { return max_bins_; }
  // True once a store folded bins to stay within max_bins (low-magnitude accuracy lost).
  bool collapsed() const { return positive_.collapsed() || negative_.collapsed(); }
  size_t memoryBytes() const { return positive_.memoryBytes() + negative_.memoryBytes(); }
  size_t binCount() const;  // non-empty bins (zero included)
  // Same mapping and the same count in every bin.
  bool sameBins(const Sketch& other) const;

  // Compact encoding (layout in docs/windows.md): version, relative error, zero count, then per
  // sign the occupied bins as zig-zag varint index deltas and varint counts.
  size_t serializedSize() const;
  // Bytes written, 0 when `out` is too small.
  size_t serialize(std::span<uint8_t> out) const;
  // Replaces this sketch's content. Rejects (returns false, leaves the sketch empty) truncated or
  // trailing bytes, a different relative error, out-of-range indexes, zero or overflowing counts.
  bool deserialize(std::span<const uint8_t> in);

  // Calls fn(value, count) for every non-empty bin with its representative value (within the
  // relative error of every sample in it), in ascending value order.
  template <class Fn>
  void forEachBin(Fn&& fn) const {
    if (!negative_.empty())
      for (int32_t i = negative_.highest(); i >= negative_.lowest(); --i)
        if (uint64_t n = negative_.at(i)) fn(-valueOf(i), n);
    if (zero_count_) fn(0.0, zero_count_);
    if (!positive_.empty())
      for (int32_t i = positive_.lowest(); i <= positive_.highest(); ++i)
        if (uint64_t n = positive_.at(i)) fn(valueOf(i), n);
  }

  int32_t indexOf(double magnitude) const;  // bin of a positive magnitude
  double valueOf(int32_t index) const;      // representative value of a bin

 private:
  double relative_error_;
  double gamma_;
  double multiplier_;     // 1 / ln(gamma)
  double min_indexable_;  // smaller magnitudes count as zero
  int32_t min_index_, max_index_;
  uint32_t max_bins_;
  uint64_t zero_count_ = 0;
  BinStore positive_, negative_;
};

}  // namespace bpftrain::collector::window
