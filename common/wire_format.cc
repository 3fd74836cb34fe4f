#include "common/wire_format.h"

#include <bit>
#include <cmath>
#include <cstring>

#include "common/metric_catalogue.h"

namespace bpftrain::wire {
namespace {

constexpr size_t kSamplesPrefix = 8;  // base timestamp

bool writeName(uint8_t*& p, const uint8_t* end, std::string_view s) {
  if (s.size() > kMaxNameLength || !isValidName(s) || p + 1 + s.size() > end) return false;
  *p++ = uint8_t(s.size());
  std::memcpy(p, s.data(), s.size());
  p += s.size();
  return true;
}

DecodeError readName(const uint8_t*& p, const uint8_t* end, std::string_view& out) {
  if (p >= end) return DecodeError::kTruncated;
  size_t n = *p++;
  if (n > kMaxNameLength) return DecodeError::kBadName;
  if (p + n > end) return DecodeError::kTruncated;
  out = std::string_view(reinterpret_cast<const char*>(p), n);
  p += n;
  return isValidName(out) ? DecodeError::kNone : DecodeError::kBadName;
}

size_t finishFrame(std::span<uint8_t> out, FrameKind kind, uint64_t sender, uint32_t seq,
                   uint16_t count, size_t total) {
  writeHeader(out, FrameHeader{kind, uint16_t(total), sender, seq, count});
  return total;
}

}  // namespace

MetricInfo metricInfo(MetricId id) {
  switch (id) {
    case MetricId::kStepSeconds:
      return {metrics::kStepSeconds.name, SampleType::kTimer};
    case MetricId::kAllreduceSeconds:
      return {metrics::kAllreduceSeconds.name, SampleType::kTimer};
    case MetricId::kAllreduceBytes:
      return {metrics::kAllreduceBytes.name, SampleType::kCounter};
    case MetricId::kAllreduceBusbwBytesPerSecond:
      return {metrics::kAllreduceBusbw.name, SampleType::kGauge};
    case MetricId::kSamplesPerSecond:
      return {metrics::kSamplesPerSecond.name, SampleType::kGauge};
    case MetricId::kLoss:
      return {metrics::kLoss.name, SampleType::kGauge};
    case MetricId::kAccuracy:
      return {metrics::kAccuracy.name, SampleType::kGauge};
    case MetricId::kTopology:
      return {metrics::kTopology.name, SampleType::kGauge};
    case MetricId::kPinning:
      return {metrics::kPinning.name, SampleType::kGauge};
    case MetricId::kConfigEpoch:
      return {metrics::kConfigEpoch.name, SampleType::kGauge};
    case MetricId::kAnonHugePagesBytes:
      return {metrics::kAnonHugePagesBytes.name, SampleType::kGauge};
    case MetricId::kTelemetryDropped:
      return {metrics::kTelemetryDropped.name, SampleType::kCounter};
    case MetricId::kCheckpointActive:
      return {metrics::kCheckpointActive.name, SampleType::kGauge};
    case MetricId::kStep:
      return {metrics::kStep.name, SampleType::kGauge};
    case MetricId::kControlRejected:
      return {metrics::kControlRejected.name, SampleType::kCounter};
  }
  return {"", SampleType::kGauge};
}

bool isValidName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && (digit || c == '-' || c == '.')))) return false;
  }
  return true;
}

void putF64(uint8_t* p, double v) { putU64(p, std::bit_cast<uint64_t>(v)); }
double getF64(const uint8_t* p) { return std::bit_cast<double>(getU64(p)); }

void writeHeader(std::span<uint8_t> out, const FrameHeader& h) {
  uint8_t* p = out.data();
  putU32(p, kMagic);
  p[4] = kVersion;
  p[5] = uint8_t(h.kind);
  putU16(p + 6, h.length);
  putU64(p + 8, h.sender_id);
  putU32(p + 16, h.sequence);
  putU16(p + 20, h.record_count);
  putU16(p + 22, 0);
}

size_t encodeSamples(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                     uint64_t base_timestamp_ns, std::span<const SampleRecord> records) {
  size_t total = kHeaderSize + kSamplesPrefix + records.size() * kSampleRecordSize;
  if (records.size() > kMaxSamplesPerFrame || total > out.size()) return 0;
  uint8_t* p = out.data() + kHeaderSize;
  putU64(p, base_timestamp_ns);
  p += kSamplesPrefix;
  for (const SampleRecord& r : records) {
    putU16(p, uint16_t(r.metric));
    p[2] = uint8_t(r.type);
    p[3] = 0;
    putU32(p + 4, r.offset_us);
    putF64(p + 8, r.value);
    p += kSampleRecordSize;
  }
  return finishFrame(out, FrameKind::kSamples, sender_id, sequence, uint16_t(records.size()),
                     total);
}

size_t encodeHello(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence, const Hello& h) {
  if (h.tids.size() > kMaxTids) return 0;
  uint8_t* p = out.data() + kHeaderSize;
  const uint8_t* end = out.data() + out.size();
  if (out.size() < kHeaderSize || !writeName(p, end, h.job) || !writeName(p, end, h.node)) return 0;
  if (p + 12 + 4 * h.tids.size() > end) return 0;
  putU32(p, h.rank);
  putU32(p + 4, h.world);
  putU32(p + 8, h.pid);
  p += 12;
  for (uint32_t tid : h.tids) {
    putU32(p, tid);
    p += 4;
  }
  return finishFrame(out, FrameKind::kHello, sender_id, sequence, uint16_t(h.tids.size()),
                     size_t(p - out.data()));
}

size_t controlSigningBytes(std::span<uint8_t> out, const Control& c) {
  uint8_t* p = out.data();
  const uint8_t* end = out.data() + out.size();
  if (!writeName(p, end, c.job) || p + 18 > end) return 0;
  putU64(p, c.epoch);
  p[8] = c.topology;
  p[9] = c.pinning;
  putU64(p + 10, c.timestamp_ns);
  return size_t(p + 18 - out.data());
}

size_t encodeControl(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                     const Control& c) {
  if (out.size() < kHeaderSize) return 0;
  size_t n = controlSigningBytes(out.subspan(kHeaderSize), c);
  size_t total = kHeaderSize + n + c.mac.size();
  if (n == 0 || total > out.size()) return 0;
  std::memcpy(out.data() + kHeaderSize + n, c.mac.data(), c.mac.size());
  return finishFrame(out, FrameKind::kControl, sender_id, sequence, 0, total);
}

DecodeError nextFrame(std::span<const uint8_t>& datagram, FrameView& frame) {
  if (datagram.size() < kHeaderSize) return DecodeError::kTruncated;
  const uint8_t* p = datagram.data();
  if (getU32(p) != kMagic) return DecodeError::kBadMagic;
  if (p[4] != kVersion) return DecodeError::kBadVersion;
  uint8_t kind = p[5];
  if (kind < uint8_t(FrameKind::kHello) || kind > uint8_t(FrameKind::kControl))
    return DecodeError::kUnknownKind;
  size_t length = getU16(p + 6);
  if (length < kHeaderSize) return DecodeError::kTruncated;
  if (length > kMaxFrameSize) return DecodeError::kOversized;
  if (length > datagram.size()) return DecodeError::kTruncated;
  frame.header =
      FrameHeader{FrameKind(kind), uint16_t(length), getU64(p + 8), getU32(p + 16), getU16(p + 20)};
  frame.body = datagram.subspan(kHeaderSize, length - kHeaderSize);
  datagram = datagram.subspan(length);
  return DecodeError::kNone;
}

SampleRecord SamplesView::operator[](size_t i) const {
  const uint8_t* p = records.data() + i * kSampleRecordSize;
  return SampleRecord{MetricId(getU16(p)), SampleType(p[2]), p[3], getU32(p + 4), getF64(p + 8)};
}

DecodeError decodeSamples(const FrameView& frame, SamplesView& out) {
  if (frame.body.size() < kSamplesPrefix) return DecodeError::kTruncated;
  size_t bytes = size_t(frame.header.record_count) * kSampleRecordSize;
  if (kSamplesPrefix + bytes > frame.body.size()) return DecodeError::kCountOverrun;
  if (kSamplesPrefix + bytes < frame.body.size()) return DecodeError::kOversized;
  out.base_timestamp_ns = getU64(frame.body.data());
  out.records = frame.body.subspan(kSamplesPrefix, bytes);
  for (size_t i = 0; i < out.size(); ++i) {
    SampleRecord r = out[i];
    if (metricInfo(r.metric).name.empty() || uint8_t(r.type) > uint8_t(SampleType::kTimer))
      return DecodeError::kUnknownMetric;
    if (!std::isfinite(r.value)) return DecodeError::kNonFinite;
  }
  return DecodeError::kNone;
}

uint32_t HelloView::tid(size_t i) const { return getU32(tid_bytes.data() + 4 * i); }

DecodeError decodeHello(const FrameView& frame, HelloView& out) {
  const uint8_t* p = frame.body.data();
  const uint8_t* end = p + frame.body.size();
  if (DecodeError e = readName(p, end, out.job); e != DecodeError::kNone) return e;
  if (DecodeError e = readName(p, end, out.node); e != DecodeError::kNone) return e;
  if (p + 12 > end) return DecodeError::kTruncated;
  out.rank = getU32(p);
  out.world = getU32(p + 4);
  out.pid = getU32(p + 8);
  p += 12;
  size_t tids = frame.header.record_count;
  if (tids > kMaxTids || p + 4 * tids > end) return DecodeError::kCountOverrun;
  if (p + 4 * tids < end) return DecodeError::kOversized;
  out.tid_bytes = std::span<const uint8_t>(p, 4 * tids);
  return DecodeError::kNone;
}

DecodeError decodeControl(const FrameView& frame, Control& out) {
  const uint8_t* p = frame.body.data();
  const uint8_t* end = p + frame.body.size();
  if (DecodeError e = readName(p, end, out.job); e != DecodeError::kNone) return e;
  if (p + 18 + out.mac.size() != end)
    return p + 18 + out.mac.size() > end ? DecodeError::kTruncated : DecodeError::kOversized;
  out.epoch = getU64(p);
  out.topology = p[8];
  out.pinning = p[9];
  out.timestamp_ns = getU64(p + 10);
  std::memcpy(out.mac.data(), p + 18, out.mac.size());
  return DecodeError::kNone;
}

}  // namespace bpftrain::wire
