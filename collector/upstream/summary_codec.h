// Window summaries on the wire (kWindowSummary frames, body layout in docs/windows.md): a child
// collector packs each series' completed step into frames; the parent validates a whole frame
// and merges it into its own store (counts summed, sketches merged).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "collector/window/series_store.h"
#include "common/wire_format.h"

namespace bpftrain::collector::upstream {

inline constexpr size_t kSummaryPrefixSize = 16;  // u64 step_ns, i64 step
inline constexpr size_t kMaxSummaryString = 255;  // names, label names and values: u8 length

// Bytes one series takes in a frame body; 0 when a name or label is too long to encode.
size_t summaryRecordSize(const window::StepSummary& s);

// Packs step summaries into frames of at most kMaxFrameSize bytes and hands each finished frame
// to `emit`. The buffer is allocated once; encoding allocates nothing.
class SummaryFramer {
 public:
  using Emit = std::function<void(std::span<const uint8_t> frame)>;
  SummaryFramer(uint64_t sender_id, Emit emit);

  void begin(int64_t step, int64_t step_ns);
  // False (nothing sent) when the series cannot fit in one frame: the caller counts it.
  bool add(const window::StepSummary& s);
  void flush();  // emits the frame in progress, if any

  uint32_t nextSequence() const { return sequence_; }

 private:
  uint64_t sender_id_;
  Emit emit_;
  uint32_t sequence_ = 0;
  int64_t step_ = 0, step_ns_ = 0;
  std::vector<uint8_t> frame_;
  size_t used_ = 0;
  uint16_t records_ = 0;
};

struct ApplyStats {
  uint32_t merged = 0;    // records merged into the store
  uint32_t rejected = 0;  // records whose series the store refused (cardinality, labels, kind)
};

// Validates every record of a kWindowSummary frame, then merges them all into `store` at now_ns
// (nothing is merged when any record is bad). Never crashes on hostile input:
//   kTruncated     body shorter than its prefix
//   kCountOverrun  records run past the body, a sketch that does not decode or whose count
//                  differs from the record's count
//   kOversized     bytes after the last record, or a sketch on a counter or gauge
//   kUnknownKind   series kind other than counter, gauge, distribution
//   kBadName       metric or label name not in Prometheus' alphabet, control bytes in a value,
//                  more than 64 labels
//   kNonFinite     NaN/Inf, zero count, min > max or last outside [min, max]
wire::DecodeError applySummary(const wire::FrameView& frame, window::SeriesStore& store, int writer,
                               int64_t now_ns, ApplyStats* stats = nullptr);

bool isValidMetricName(std::string_view s);
bool isValidLabelName(std::string_view s);

}  // namespace bpftrain::collector::upstream
