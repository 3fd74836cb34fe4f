// The bpftrain wire format: little-endian binary frames shared by trainer, load generator and
// collector. docs/wire-format.md is the specification; tests/common/golden/ holds its test vectors.
// Encoders write into a caller-owned buffer and decoders return views into the datagram, so neither
// allocates per message.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "common/enum_names.h"

namespace bpftrain::wire {

inline constexpr uint32_t kMagic = 0x4E525442;  // "BTRN" in little-endian byte order
inline constexpr uint8_t kVersion = 1;
inline constexpr size_t kHeaderSize = 24;
inline constexpr size_t kMaxFrameSize = 8192;      // one frame; a datagram may carry several
inline constexpr size_t kMaxDatagramSize = 65507;  // largest UDP payload over IPv4
inline constexpr size_t kMaxNameLength = 64;       // job and node names
inline constexpr size_t kMaxTids = 256;            // threads announced in one hello
inline constexpr size_t kSampleRecordSize = 16;
inline constexpr size_t kMaxSamplesPerFrame = (kMaxFrameSize - kHeaderSize - 8) / kSampleRecordSize;

enum class FrameKind : uint8_t {
  kHello = 1,            // who the sender is: job, rank, node, pid, tids
  kSamples = 2,          // metric samples
  kWindowSummary = 3,    // one series' window step (collector → parent collector)
  kControl = 4,          // a signed controller decision (controller → trainer rank 0)
  kLabelledSamples = 5,  // samples that carry label values (the NCCL profiler plugin)
  kNcclControl = 6,      // a signed NCCL algorithm/protocol decision (→ the NCCL tuner plugin)
};

// Metrics a rank streams in binary frames. Ids are part of the wire contract: append, never reuse.
enum class MetricId : uint16_t {
  kStepSeconds = 1,
  kAllreduceSeconds = 2,
  kAllreduceBytes = 3,
  kAllreduceBusbwBytesPerSecond = 4,
  kSamplesPerSecond = 5,
  kLoss = 6,
  kAccuracy = 7,
  kTopology = 8,  // value: trainer topology enum
  kPinning = 9,   // value: trainer pinning enum
  kConfigEpoch = 10,
  kAnonHugePagesBytes = 11,
  kTelemetryDropped = 12,  // samples the emitter dropped because its socket was full
  kCheckpointActive = 13,  // 1 while a checkpoint is being written
  kStep = 14,
  // Controller decisions rank 0 rejected (bad MAC, stale, replay...); reasons in its log.
  kControlRejected = 15,
  kCheckpointFailures = 16,  // checkpoints that could not be written (training went on)
  // Control datagrams the kernel dropped at rank 0's control socket (its buffer was full).
  kControlDropped = 17,
  // One timed ring probe (trainer/control/ring_probe.h), seconds.
  kRingProbeSeconds = 18,
  kLast = kRingProbeSeconds,
};

enum class SampleType : uint8_t { kGauge = 0, kCounter = 1, kTimer = 2 };

// Stored metric name (from common/metric_catalogue.h) and sample type of a binary metric id;
// empty name for an unknown id.
struct MetricInfo {
  std::string_view name;
  SampleType type;
};
MetricInfo metricInfo(MetricId id);

struct FrameHeader {
  FrameKind kind{};
  uint16_t length = 0;  // whole frame, header included
  uint64_t sender_id = 0;
  uint32_t sequence = 0;
  uint16_t record_count = 0;
};

struct SampleRecord {
  MetricId metric{};
  SampleType type = SampleType::kGauge;
  uint8_t reserved = 0;
  uint32_t offset_us = 0;  // microseconds after the frame's base timestamp
  double value = 0;
};

struct Hello {
  std::string_view job;
  std::string_view node;
  uint32_t rank = 0;
  uint32_t world = 0;
  uint32_t pid = 0;
  std::span<const uint32_t> tids;  // encode side only; decode fills HelloView::tid_bytes
};

struct Control {
  std::string_view job;
  uint64_t epoch = 0;
  uint8_t topology = 0;
  uint8_t pinning = 0;
  uint64_t timestamp_ns = 0;
  std::array<uint8_t, 32> mac{};  // HMAC-SHA256 over controlSigningBytes()
};

// Why a frame was rejected; exported as the `reason` label of decode_errors_total. One list, so
// that the collector's own reasons (collector/ingest/ingest_stats.h) can begin with these.
#define BPFTRAIN_WIRE_DECODE_ERRORS(X) \
  X(kTruncated, "truncated")           \
  X(kOversized, "oversized")           \
  X(kBadMagic, "bad_magic")            \
  X(kBadVersion, "bad_version")        \
  X(kUnknownKind, "unknown_kind")      \
  X(kCountOverrun, "count_overrun")    \
  X(kUnknownMetric, "unknown_metric")  \
  X(kNonFinite, "non_finite")          \
  X(kBadName, "bad_name")
#define BPFTRAIN_ENUMERATOR(id, name) id,
#define BPFTRAIN_DECODE_ERROR_NAME(id, name) {DecodeError::id, name},
// One enumerator a line, as if the list were written out.
// clang-format off
enum class DecodeError : uint8_t {
  kNone = 0,
  BPFTRAIN_WIRE_DECODE_ERRORS(BPFTRAIN_ENUMERATOR)
  kCount,
};
// clang-format on
inline constexpr auto kDecodeErrorNames = enumNames<DecodeError>(
    {{DecodeError::kNone, "none"}, BPFTRAIN_WIRE_DECODE_ERRORS(BPFTRAIN_DECODE_ERROR_NAME)});
#undef BPFTRAIN_DECODE_ERROR_NAME
static_assert(kDecodeErrorNames.size() == size_t(DecodeError::kCount));
inline constexpr std::string_view decodeErrorName(DecodeError e) {
  return kDecodeErrorNames.name(e);
}

// ---- encoding: each returns bytes written, 0 if `out` is too small or an input is out of bounds.
size_t encodeSamples(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                     uint64_t base_timestamp_ns, std::span<const SampleRecord> records);
size_t encodeHello(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence, const Hello& h);
size_t encodeControl(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                     const Control& c);
// The bytes the control MAC covers: job, epoch, topology, pinning, timestamp (see wire-format.md).
size_t controlSigningBytes(std::span<uint8_t> out, const Control& c);

// Writes a frame header; the body is the caller's (window summaries are encoded by the collector).
void writeHeader(std::span<uint8_t> out, const FrameHeader& h);

// ---- decoding: views into the datagram, valid while it lives.
struct FrameView {
  FrameHeader header;
  std::span<const uint8_t> body;  // bytes after the header
};

// Splits the next frame off `datagram`; on success advances `datagram` past it.
DecodeError nextFrame(std::span<const uint8_t>& datagram, FrameView& frame);

struct SamplesView {
  uint64_t base_timestamp_ns = 0;
  std::span<const uint8_t> records;  // record_count × kSampleRecordSize bytes
  size_t size() const { return records.size() / kSampleRecordSize; }
  SampleRecord operator[](size_t i) const;
};
DecodeError decodeSamples(const FrameView& frame, SamplesView& out);

struct HelloView {
  std::string_view job;
  std::string_view node;
  uint32_t rank = 0;
  uint32_t world = 0;
  uint32_t pid = 0;
  std::span<const uint8_t> tid_bytes;  // little-endian uint32 each
  size_t tidCount() const { return tid_bytes.size() / 4; }
  uint32_t tid(size_t i) const;
};
DecodeError decodeHello(const FrameView& frame, HelloView& out);

DecodeError decodeControl(const FrameView& frame, Control& out);

// ---- NCCL plugins (plugins/nccl/): labelled samples and tuner decisions (docs/wire-format.md).
// Metrics of kLabelledSamples frames: their own id space, so the per-sender slots of plain samples
// stay small. Each carries the values of the catalogue labels after `job rank`, in order.
enum class LabelledMetricId : uint16_t {
  kNcclCollectiveSeconds = 1,
  kNcclCollectives = 2,
  kNcclCollectiveBytes = 3,
  kNcclBusbw = 4,
  kNcclCollectiveChannels = 5,
  kNcclOutstandingSteps = 6,
  kNcclSteps = 7,
  kNcclStepBytes = 8,
  kNcclStepWaitSeconds = 9,
  kNcclTunerCalls = 10,
  kNcclDecisionEpoch = 11,
  kNcclDecisionsRefused = 12,
  kNcclEventsDropped = 13,
  kLast = kNcclEventsDropped,
};
inline constexpr size_t kMaxLabels = 6;             // label values in one labelled record
inline constexpr size_t kMaxLabelValueLength = 32;  // letters, digits, _ . : -

struct LabelledMetricInfo {
  std::string_view name;  // empty for an unknown id
  SampleType type = SampleType::kGauge;
  std::string_view labels;  // the catalogue's label names after `job rank`, space separated
  size_t label_count = 0;
};
LabelledMetricInfo labelledMetricInfo(LabelledMetricId id);

struct LabelledRecord {
  LabelledMetricId metric{};
  SampleType type = SampleType::kGauge;
  uint32_t offset_us = 0;
  double value = 0;
  size_t label_count = 0;
  std::array<std::string_view, kMaxLabels> labels{};
};

// Appends labelled records into one frame in `out`; finish() writes the header and returns the
// frame's size (0 when no record was added).
class LabelledFrameBuilder {
 public:
  explicit LabelledFrameBuilder(std::span<uint8_t> out);
  // False (nothing written) when the record does not fit or a label value is invalid.
  bool add(const LabelledRecord& r);
  size_t finish(uint64_t sender_id, uint32_t sequence, uint64_t base_timestamp_ns);
  uint16_t count() const { return count_; }

 private:
  std::span<uint8_t> out_;
  size_t used_;
  uint16_t count_ = 0;
};

struct LabelledSamplesView {
  uint64_t base_timestamp_ns = 0;
  std::span<const uint8_t> records;
  size_t count = 0;
  // Reads the record at byte `offset` of `records` and advances it; only after a successful
  // decodeLabelledSamples().
  LabelledRecord next(size_t& offset) const;
};
// All or nothing: every record has a known metric, its catalogue's label count, valid values.
DecodeError decodeLabelledSamples(const FrameView& frame, LabelledSamplesView& out);
bool isValidLabelValue(std::string_view s);

// A tuner decision for one job's communicator (or all of them), from a collective call on.
inline constexpr uint8_t kNcclAny = 0xff;
struct NcclControl {
  std::string_view job;
  uint64_t epoch = 0;
  uint64_t comm_id = 0;           // NCCL's commId; 0: every communicator of the process
  uint64_t start_call = 0;        // the communicator's tuner call index from which it applies
  uint8_t collective = kNcclAny;  // ncclFunc_t (4: AllReduce); kNcclAny: every collective
  uint8_t algorithm = kNcclAny;   // 0 TREE .. 6 PAT; kNcclAny: back to NCCL's own choice
  uint8_t protocol = kNcclAny;    // 0 LL, 1 LL128, 2 SIMPLE; kNcclAny: the algorithm's cheapest
  uint8_t channels = 0;           // 0: NCCL's choice
  uint64_t timestamp_ns = 0;
  std::array<uint8_t, 32> mac{};  // HMAC-SHA256 over ncclControlSigningBytes()
};
size_t ncclControlSigningBytes(std::span<uint8_t> out, const NcclControl& c);
size_t encodeNcclControl(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                         const NcclControl& c);
DecodeError decodeNcclControl(const FrameView& frame, NcclControl& out);

// Job and node names: a letter or _, then letters, digits, _, - or . (hostnames fit).
bool isValidName(std::string_view s);

// Little-endian helpers used by the format and by the collector's summary encoder.
inline void putU16(uint8_t* p, uint16_t v) {
  p[0] = uint8_t(v);
  p[1] = uint8_t(v >> 8);
}
inline void putU32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void putU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline uint16_t getU16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }
inline uint32_t getU32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
inline uint64_t getU64(const uint8_t* p) {
  return uint64_t(getU32(p)) | uint64_t(getU32(p + 4)) << 32;
}
void putF64(uint8_t* p, double v);
double getF64(const uint8_t* p);

}  // namespace bpftrain::wire
