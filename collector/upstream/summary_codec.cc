#include "collector/upstream/summary_codec.h"

#include <array>
#include <cmath>
#include <cstring>

namespace bpftrain::collector::upstream {
namespace {

using window::SeriesKind;
using wire::DecodeError;

inline constexpr size_t kMaxLabels = 64;
// kind, name length, label count, count, sum, min, max, last, sketch length
inline constexpr size_t kRecordFixed = 1 + 1 + 1 + 8 + 4 * 8 + 2;

bool isAlpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool isDigit(char c) { return c >= '0' && c <= '9'; }

struct Record {
  SeriesKind kind{};
  std::string_view name;
  std::array<window::Label, kMaxLabels> labels;
  size_t label_count = 0;
  uint64_t count = 0;
  double sum = 0, min = 0, max = 0, last = 0;
  std::span<const uint8_t> sketch;
};

class Cursor {
 public:
  explicit Cursor(std::span<const uint8_t> in) : in_(in) {}
  bool u8(uint8_t& v) {
    if (left() < 1) return false;
    v = in_[pos_++];
    return true;
  }
  bool u16(uint16_t& v) {
    if (left() < 2) return false;
    v = wire::getU16(in_.data() + pos_);
    pos_ += 2;
    return true;
  }
  bool u64(uint64_t& v) {
    if (left() < 8) return false;
    v = wire::getU64(in_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool f64(double& v) {
    if (left() < 8) return false;
    v = wire::getF64(in_.data() + pos_);
    pos_ += 8;
    return true;
  }
  bool bytes(size_t n, std::span<const uint8_t>& out) {
    if (left() < n) return false;
    out = in_.subspan(pos_, n);
    pos_ += n;
    return true;
  }
  bool str(std::string_view& out) {
    uint8_t n;
    std::span<const uint8_t> b;
    if (!u8(n) || !bytes(n, b)) return false;
    out = std::string_view(reinterpret_cast<const char*>(b.data()), b.size());
    return true;
  }
  size_t left() const { return in_.size() - pos_; }

 private:
  std::span<const uint8_t> in_;
  size_t pos_ = 0;
};

bool printable(std::string_view s) {
  for (unsigned char c : s)
    if (c < 0x20 || c == 0x7f) return false;
  return true;
}

// Parses and checks one record; the sketch bytes are decoded into `sketch`.
DecodeError readRecord(Cursor& c, Record& r, window::Sketch& sketch) {
  uint8_t kind, nlabels;
  if (!c.u8(kind) || !c.str(r.name) || !c.u8(nlabels)) return DecodeError::kCountOverrun;
  if (kind > uint8_t(SeriesKind::kDistribution)) return DecodeError::kUnknownKind;
  r.kind = SeriesKind(kind);
  if (!isValidMetricName(r.name)) return DecodeError::kBadName;
  if (nlabels > kMaxLabels) return DecodeError::kBadName;
  r.label_count = nlabels;
  for (size_t i = 0; i < nlabels; ++i) {
    if (!c.str(r.labels[i].name) || !c.str(r.labels[i].value)) return DecodeError::kCountOverrun;
    if (!isValidLabelName(r.labels[i].name) || !printable(r.labels[i].value))
      return DecodeError::kBadName;
  }
  uint16_t sketch_len;
  if (!c.u64(r.count) || !c.f64(r.sum) || !c.f64(r.min) || !c.f64(r.max) || !c.f64(r.last) ||
      !c.u16(sketch_len) || !c.bytes(sketch_len, r.sketch))
    return DecodeError::kCountOverrun;
  if (!std::isfinite(r.sum) || !std::isfinite(r.min) || !std::isfinite(r.max) ||
      !std::isfinite(r.last) || r.count == 0 || r.min > r.max || r.last < r.min || r.last > r.max)
    return DecodeError::kNonFinite;
  if (r.kind == SeriesKind::kDistribution) {
    if (!sketch.deserialize(r.sketch) || sketch.count() != r.count)
      return DecodeError::kCountOverrun;
  } else if (sketch_len != 0) {
    return DecodeError::kOversized;
  }
  return DecodeError::kNone;
}

}  // namespace

bool isValidMetricName(std::string_view s) {
  if (s.empty() || !(isAlpha(s[0]) || s[0] == ':')) return false;
  for (char c : s)
    if (!(isAlpha(c) || isDigit(c) || c == ':')) return false;
  return true;
}

bool isValidLabelName(std::string_view s) {
  if (s.empty() || !isAlpha(s[0]) || s.substr(0, 2) == "__") return false;
  for (char c : s)
    if (!(isAlpha(c) || isDigit(c))) return false;
  return true;
}

size_t summaryRecordSize(const window::StepSummary& s) {
  if (s.name.size() > kMaxSummaryString || s.labels.size() > kMaxLabels) return 0;
  size_t n = kRecordFixed + s.name.size();
  for (const auto& [k, v] : s.labels) {
    if (k.size() > kMaxSummaryString || v.size() > kMaxSummaryString) return 0;
    n += 2 + k.size() + v.size();
  }
  if (s.kind == SeriesKind::kDistribution && s.sketch) {
    size_t sk = s.sketch->serializedSize();
    if (sk > UINT16_MAX) return 0;
    n += sk;
  }
  return n;
}

SummaryFramer::SummaryFramer(uint64_t sender_id, Emit emit)
    : sender_id_(sender_id), emit_(std::move(emit)), frame_(wire::kMaxFrameSize) {}

void SummaryFramer::begin(int64_t step, int64_t step_ns) {
  flush();
  step_ = step;
  step_ns_ = step_ns;
}

bool SummaryFramer::add(const window::StepSummary& s) {
  const size_t size = summaryRecordSize(s);
  const size_t empty = wire::kHeaderSize + kSummaryPrefixSize;
  if (size == 0 || empty + size > wire::kMaxFrameSize) return false;
  if (used_ != 0 && (used_ + size > wire::kMaxFrameSize || records_ == UINT16_MAX)) flush();
  if (used_ == 0) {
    wire::putU64(&frame_[wire::kHeaderSize], uint64_t(step_ns_));
    wire::putU64(&frame_[wire::kHeaderSize + 8], uint64_t(step_));
    used_ = empty;
  }
  uint8_t* p = &frame_[used_];
  auto putStr = [&p](std::string_view v) {
    *p++ = uint8_t(v.size());
    std::memcpy(p, v.data(), v.size());
    p += v.size();
  };
  *p++ = uint8_t(s.kind);
  putStr(s.name);
  *p++ = uint8_t(s.labels.size());
  for (const auto& [k, v] : s.labels) {
    putStr(k);
    putStr(v);
  }
  wire::putU64(p, s.count);
  p += 8;
  for (double v : {s.sum, s.min, s.max, s.last}) {
    wire::putF64(p, v);
    p += 8;
  }
  size_t sketch_len = 0;
  if (s.kind == SeriesKind::kDistribution && s.sketch) {
    sketch_len = s.sketch->serialize(std::span<uint8_t>(p + 2, frame_.data() + frame_.size()));
  }
  wire::putU16(p, uint16_t(sketch_len));
  p += 2 + sketch_len;
  used_ = size_t(p - frame_.data());
  ++records_;
  return true;
}

void SummaryFramer::flush() {
  if (used_ == 0) return;
  wire::writeHeader(frame_, wire::FrameHeader{wire::FrameKind::kWindowSummary, uint16_t(used_),
                                              sender_id_, sequence_++, records_});
  emit_(std::span<const uint8_t>(frame_.data(), used_));
  used_ = 0;
  records_ = 0;
}

DecodeError applySummary(const wire::FrameView& frame, window::SeriesStore& store, int writer,
                         int64_t now_ns, ApplyStats* stats) {
  if (frame.header.kind != wire::FrameKind::kWindowSummary) return DecodeError::kUnknownKind;
  if (frame.body.size() < kSummaryPrefixSize) return DecodeError::kTruncated;
  // One scratch sketch per ingest thread, sized once: merging allocates nothing in steady state.
  thread_local window::Sketch scratch(store.config().relative_error);
  if (scratch.relativeError() != store.config().relative_error)
    scratch = window::Sketch(store.config().relative_error);
  Record r;
  const std::span<const uint8_t> records = frame.body.subspan(kSummaryPrefixSize);
  // Pass 1: the whole frame must be valid before anything is merged.
  Cursor check(records);
  for (uint16_t i = 0; i < frame.header.record_count; ++i)
    if (DecodeError e = readRecord(check, r, scratch); e != DecodeError::kNone) return e;
  if (check.left() != 0) return DecodeError::kOversized;
  // Pass 2: merge.
  Cursor cursor(records);
  for (uint16_t i = 0; i < frame.header.record_count; ++i) {
    readRecord(cursor, r, scratch);
    window::SeriesId id = store.lookup(
        r.name, std::span<const window::Label>(r.labels.data(), r.label_count), r.kind);
    if (id == window::kRejectedSeries) {
      if (stats) ++stats->rejected;
      continue;
    }
    window::StepSummary s;
    s.kind = r.kind;
    s.count = r.count;
    s.sum = r.sum;
    s.min = r.min;
    s.max = r.max;
    s.last = r.last;
    s.sketch = r.kind == SeriesKind::kDistribution ? &scratch : nullptr;
    store.mergeStep(writer, id, s, now_ns);
    if (stats) ++stats->merged;
  }
  return DecodeError::kNone;
}

}  // namespace bpftrain::collector::upstream
