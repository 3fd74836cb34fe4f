#include "collector/window/sketch.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

namespace bpftrain::collector::window {
namespace {

inline constexpr uint8_t kSketchFormat = 1;
// Far more samples than any window holds; keeps count arithmetic clear of overflow.
inline constexpr uint64_t kMaxSerializedCount = uint64_t{1} << 62;

uint64_t zigzag(int64_t v) { return (uint64_t(v) << 1) ^ uint64_t(v >> 63); }
int64_t unzigzag(uint64_t v) { return int64_t(v >> 1) ^ -int64_t(v & 1); }

size_t varintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

class Writer {
 public:
  explicit Writer(std::span<uint8_t> out) : out_(out) {}
  void byte(uint8_t b) {
    if (pos_ < out_.size()) out_[pos_] = b;
    ++pos_;
  }
  void varint(uint64_t v) {
    while (v >= 0x80) {
      byte(uint8_t(v) | 0x80);
      v >>= 7;
    }
    byte(uint8_t(v));
  }
  void f64(double v) {
    uint64_t bits;
    std::memcpy(&bits, &v, 8);
    for (int i = 0; i < 8; ++i) byte(uint8_t(bits >> (8 * i)));
  }
  size_t written() const { return pos_; }
  bool fits() const { return pos_ <= out_.size(); }

 private:
  std::span<uint8_t> out_;
  size_t pos_ = 0;
};

class Reader {
 public:
  explicit Reader(std::span<const uint8_t> in) : in_(in) {}
  bool byte(uint8_t& b) {
    if (pos_ >= in_.size()) return false;
    b = in_[pos_++];
    return true;
  }
  bool varint(uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!byte(b)) return false;
      if (shift == 63 && b > 1) return false;  // more than 64 bits
      v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  bool f64(double& v) {
    if (in_.size() - pos_ < 8) return false;
    uint64_t bits = 0;
    for (int i = 0; i < 8; ++i) bits |= uint64_t(in_[pos_ + i]) << (8 * i);
    pos_ += 8;
    std::memcpy(&v, &bits, 8);
    return true;
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

template <typename Out>
void writeStore(Out& w, const BinStore& s) {
  if (s.empty()) {
    w.varint(0);
    return;
  }
  uint64_t n = 0;
  for (int32_t i = s.lowest(); i <= s.highest(); ++i) n += s.at(i) != 0;
  w.varint(n);
  int64_t prev = 0;
  for (int32_t i = s.lowest(); i <= s.highest(); ++i) {
    uint64_t c = s.at(i);
    if (c == 0) continue;
    w.varint(zigzag(int64_t(i) - prev));
    w.varint(c);
    prev = i;
  }
}

// Counts bytes without writing them, so serializedSize() shares writeStore().
struct SizeCounter {
  size_t n = 0;
  void varint(uint64_t v) { n += varintSize(v); }
};

}  // namespace

void BinStore::cover(int32_t lo, int32_t hi, uint32_t max_bins) {
  const int64_t size = int64_t(bins_.size());
  if (size > 0 && lo >= offset_ && int64_t(hi) < offset_ + size) return;
  const int64_t width = int64_t(hi) - lo + 1;
  if (width <= size) {
    // Slide the window in place: the occupied bins all lie inside [lo, hi].
    const int64_t new_offset = lo - (size - width) / 2;
    const int64_t ov_lo = std::max<int64_t>(offset_, new_offset);
    const int64_t ov_hi = std::min<int64_t>(offset_ + size, new_offset + size);
    if (ov_lo < ov_hi) {
      std::memmove(&bins_[size_t(ov_lo - new_offset)], &bins_[size_t(ov_lo - offset_)],
                   size_t(ov_hi - ov_lo) * sizeof(uint32_t));
      std::fill(bins_.begin(), bins_.begin() + (ov_lo - new_offset), 0);
      std::fill(bins_.begin() + (ov_hi - new_offset), bins_.end(), 0);
    } else {
      std::fill(bins_.begin(), bins_.end(), 0);
    }
    offset_ = int32_t(new_offset);
    return;
  }
  // Geometric growth (amortized O(1) as a range creeps outward) with modest slack: window
  // buckets are many and small, so memory per series matters more than the odd reallocation.
  int64_t new_size = std::max<int64_t>({width + 8, size + size / 2, 32});
  new_size = std::max<int64_t>(std::min<int64_t>(new_size, max_bins), width);
  const int64_t new_offset = lo - (new_size - width) / 2;
  std::vector<uint32_t> grown(size_t(new_size), 0);
  const int64_t ov_lo = std::max<int64_t>(offset_, new_offset);
  const int64_t ov_hi = std::min<int64_t>(offset_ + size, new_offset + new_size);
  for (int64_t i = ov_lo; i < ov_hi; ++i)
    grown[size_t(i - new_offset)] = bins_[size_t(i - offset_)];
  bins_.swap(grown);
  offset_ = int32_t(new_offset);
}

void BinStore::add(int32_t index, uint64_t n, uint32_t max_bins) {
  if (total_ == 0) {
    cover(index, index, max_bins);
    lo_ = hi_ = index;
  } else if (index < lo_) {
    if (int64_t(hi_) - index + 1 > int64_t(max_bins)) {
      index = hi_ - int32_t(max_bins) + 1;  // fold into the lowest bin we keep
      collapsed_ = true;
    }
    if (index < lo_) {
      cover(index, hi_, max_bins);
      lo_ = index;
    }
  } else if (index > hi_) {
    if (int64_t(index) - lo_ + 1 > int64_t(max_bins)) {
      const int32_t new_lo = index - int32_t(max_bins) + 1;
      uint64_t folded = 0;
      for (int32_t i = lo_; i < new_lo && i <= hi_; ++i) {
        folded += bins_[size_t(i - offset_)];
        bins_[size_t(i - offset_)] = 0;
      }
      cover(new_lo, index, max_bins);
      total_ -= folded - bump(new_lo, folded);
      lo_ = new_lo;
      collapsed_ = true;
    } else {
      cover(lo_, index, max_bins);
    }
    hi_ = index;
  }
  total_ += bump(index, n);
}

void BinStore::merge(const BinStore& other, uint32_t max_bins) {
  if (other.empty()) return;
  const int32_t lo = empty() ? other.lo_ : std::min(lo_, other.lo_);
  const int32_t hi = empty() ? other.hi_ : std::max(hi_, other.hi_);
  if (int64_t(hi) - lo + 1 <= int64_t(max_bins)) {
    cover(lo, hi, max_bins);
    for (int32_t i = other.lo_; i <= other.hi_; ++i)
      total_ += bump(i, other.bins_[size_t(i - other.offset_)]);
    lo_ = lo;
    hi_ = hi;
    collapsed_ = collapsed_ || other.collapsed_;
    return;
  }
  // Highest first, so the fold happens once and the rest clamps into the lowest kept bin.
  for (int32_t i = other.hi_; i >= other.lo_; --i) {
    uint64_t c = other.bins_[size_t(i - other.offset_)];
    if (c) add(i, c, max_bins);
  }
  collapsed_ = true;
}

void BinStore::clear() {
  if (total_ > 0)
    std::fill(bins_.begin() + (lo_ - offset_), bins_.begin() + (hi_ - offset_) + 1, 0);
  total_ = 0;
  lo_ = 0;
  hi_ = -1;
  collapsed_ = false;
}

bool BinStore::operator==(const BinStore& other) const {
  if (total_ != other.total_) return false;
  if (total_ == 0) return true;
  if (lo_ != other.lo_ || hi_ != other.hi_) return false;
  for (int32_t i = lo_; i <= hi_; ++i)
    if (at(i) != other.at(i)) return false;
  return true;
}

Sketch::Sketch(double relative_error, uint32_t max_bins)
    : relative_error_(std::clamp(relative_error, 1e-6, 0.5)),
      gamma_((1 + relative_error_) / (1 - relative_error_)),
      multiplier_(1 / std::log(gamma_)),
      min_indexable_(DBL_MIN * gamma_),
      max_bins_(std::max<uint32_t>(max_bins, 2)) {
  min_index_ = indexOf(min_indexable_) - 1;
  max_index_ = int32_t(std::ceil(std::log(DBL_MAX) * multiplier_)) + 1;
}

int32_t Sketch::indexOf(double magnitude) const {
  return int32_t(std::ceil(std::log(magnitude) * multiplier_));
}

double Sketch::valueOf(int32_t index) const {
  // gamma^index * 2 / (1 + gamma): the midpoint in relative terms of (gamma^(i-1), gamma^i].
  double v = std::exp(index / multiplier_ + std::log(2 / (1 + gamma_)));
  return std::min(v, DBL_MAX);
}

bool Sketch::add(double v, uint64_t n) {
  if (!std::isfinite(v)) return false;
  if (n == 0) return true;
  if (v > min_indexable_) {
    positive_.add(indexOf(v), n, max_bins_);
  } else if (v < -min_indexable_) {
    negative_.add(indexOf(-v), n, max_bins_);
  } else {
    zero_count_ += n;
  }
  return true;
}

bool Sketch::merge(const Sketch& other) {
  if (other.relative_error_ != relative_error_) return false;
  positive_.merge(other.positive_, max_bins_);
  negative_.merge(other.negative_, max_bins_);
  zero_count_ += other.zero_count_;
  return true;
}

void Sketch::clear() {
  positive_.clear();
  negative_.clear();
  zero_count_ = 0;
}

bool Sketch::sameBins(const Sketch& other) const {
  return relative_error_ == other.relative_error_ && zero_count_ == other.zero_count_ &&
         positive_ == other.positive_ && negative_ == other.negative_;
}

double Sketch::quantile(double q) const {
  const uint64_t n = count();
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  const double rank = std::clamp(q, 0.0, 1.0) * double(n - 1);
  uint64_t seen = 0;
  if (!negative_.empty()) {
    for (int32_t i = negative_.highest(); i >= negative_.lowest(); --i) {
      seen += negative_.at(i);
      if (double(seen) > rank) return -valueOf(i);
    }
  }
  seen += zero_count_;
  if (double(seen) > rank) return 0;
  if (!positive_.empty()) {
    for (int32_t i = positive_.lowest(); i <= positive_.highest(); ++i) {
      seen += positive_.at(i);
      if (double(seen) > rank) return valueOf(i);
    }
    return valueOf(positive_.highest());
  }
  return 0;
}

size_t Sketch::binCount() const {
  size_t n = zero_count_ ? 1 : 0;
  for (const BinStore* s : {&positive_, &negative_})
    if (!s->empty())
      for (int32_t i = s->lowest(); i <= s->highest(); ++i) n += s->at(i) != 0;
  return n;
}

size_t Sketch::serializedSize() const {
  SizeCounter c;
  c.n = 1 + 8;
  c.varint(zero_count_);
  writeStore(c, positive_);
  writeStore(c, negative_);
  return c.n;
}

size_t Sketch::serialize(std::span<uint8_t> out) const {
  Writer w(out);
  w.byte(kSketchFormat);
  w.f64(relative_error_);
  w.varint(zero_count_);
  writeStore(w, positive_);
  writeStore(w, negative_);
  return w.fits() ? w.written() : 0;
}

bool Sketch::deserialize(std::span<const uint8_t> in) {
  clear();
  Reader r(in);
  uint8_t format;
  double error;
  uint64_t zeros;
  if (!r.byte(format) || format != kSketchFormat) return false;
  if (!r.f64(error) || std::memcmp(&error, &relative_error_, sizeof error) != 0) return false;
  if (!r.varint(zeros) || zeros > kMaxSerializedCount) return false;
  uint64_t total = zeros;
  for (BinStore* store : {&positive_, &negative_}) {
    uint64_t bins;
    // Every bin takes at least two bytes, which bounds the loop by the input size.
    if (!r.varint(bins) || bins > r.remaining() / 2) {
      clear();
      return false;
    }
    int64_t index = 0;
    for (uint64_t b = 0; b < bins; ++b) {
      uint64_t delta, c;
      if (!r.varint(delta) || !r.varint(c)) {
        clear();
        return false;
      }
      const int64_t step = unzigzag(delta);
      if ((b > 0 && step <= 0) || step < int64_t(min_index_) * 2 ||
          step > int64_t(max_index_) * 2) {
        clear();
        return false;
      }
      index += step;
      total += c;
      if (index < min_index_ || index > max_index_ || c == 0 || c > UINT32_MAX ||
          total > kMaxSerializedCount) {
        clear();
        return false;
      }
      store->add(int32_t(index), c, max_bins_);
    }
  }
  if (r.remaining() != 0) {
    clear();
    return false;
  }
  zero_count_ = zeros;
  return true;
}

}  // namespace bpftrain::collector::window
