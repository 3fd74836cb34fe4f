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
    case MetricId::kCheckpointFailures:
      return {metrics::kCheckpointFailures.name, SampleType::kCounter};
    case MetricId::kControlDropped:
      return {metrics::kControlDropped.name, SampleType::kCounter};
    case MetricId::kRingProbeSeconds:
      return {metrics::kRingProbeSeconds.name, SampleType::kTimer};
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
  if (kind < uint8_t(FrameKind::kHello) || kind > uint8_t(FrameKind::kNcclControl))
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

// ---------------------------------------------------------------- NCCL plugins

namespace {

constexpr size_t kLabelledRecordFixed = 16;  // metric, type, label count, offset, value

const metrics::MetricDef* labelledDef(LabelledMetricId id) {
  switch (id) {
    case LabelledMetricId::kNcclCollectiveSeconds:
      return &metrics::kNcclCollectiveSeconds;
    case LabelledMetricId::kNcclCollectives:
      return &metrics::kNcclCollectives;
    case LabelledMetricId::kNcclCollectiveBytes:
      return &metrics::kNcclCollectiveBytes;
    case LabelledMetricId::kNcclBusbw:
      return &metrics::kNcclBusbw;
    case LabelledMetricId::kNcclCollectiveChannels:
      return &metrics::kNcclCollectiveChannels;
    case LabelledMetricId::kNcclOutstandingSteps:
      return &metrics::kNcclOutstandingSteps;
    case LabelledMetricId::kNcclSteps:
      return &metrics::kNcclSteps;
    case LabelledMetricId::kNcclStepBytes:
      return &metrics::kNcclStepBytes;
    case LabelledMetricId::kNcclStepWaitSeconds:
      return &metrics::kNcclStepWaitSeconds;
    case LabelledMetricId::kNcclTunerCalls:
      return &metrics::kNcclTunerCalls;
    case LabelledMetricId::kNcclDecisionEpoch:
      return &metrics::kNcclDecisionEpoch;
    case LabelledMetricId::kNcclDecisionsRefused:
      return &metrics::kNcclDecisionsRefused;
    case LabelledMetricId::kNcclEventsDropped:
      return &metrics::kNcclEventsDropped;
  }
  return nullptr;
}

}  // namespace

LabelledMetricInfo labelledMetricInfo(LabelledMetricId id) {
  const metrics::MetricDef* def = labelledDef(id);
  if (def == nullptr) return {};
  constexpr std::string_view kPrefix = "job rank";
  std::string_view rest = def->labels.substr(def->labels.starts_with(kPrefix) ? kPrefix.size() : 0);
  while (rest.starts_with(' ')) rest.remove_prefix(1);
  size_t n = rest.empty() ? 0 : 1;
  for (char c : rest) n += c == ' ';
  SampleType type = def->kind == metrics::Kind::kCounter ? SampleType::kCounter
                    : def->kind == metrics::Kind::kGauge ? SampleType::kGauge
                                                         : SampleType::kTimer;
  return {def->name, type, rest, n};
}

bool isValidLabelValue(std::string_view s) {
  if (s.empty() || s.size() > kMaxLabelValueLength) return false;
  for (char c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == ':' || c == '-';
    if (!ok) return false;
  }
  return true;
}

LabelledFrameBuilder::LabelledFrameBuilder(std::span<uint8_t> out)
    : out_(out), used_(kHeaderSize + kSamplesPrefix) {}

bool LabelledFrameBuilder::add(const LabelledRecord& r) {
  if (r.label_count > kMaxLabels || count_ == UINT16_MAX) return false;
  size_t need = kLabelledRecordFixed;
  for (size_t i = 0; i < r.label_count; ++i) {
    if (!isValidLabelValue(r.labels[i])) return false;
    need += 1 + r.labels[i].size();
  }
  if (used_ + need > out_.size() || used_ + need > kMaxFrameSize) return false;
  uint8_t* p = out_.data() + used_;
  putU16(p, uint16_t(r.metric));
  p[2] = uint8_t(r.type);
  p[3] = uint8_t(r.label_count);
  putU32(p + 4, r.offset_us);
  putF64(p + 8, r.value);
  p += kLabelledRecordFixed;
  for (size_t i = 0; i < r.label_count; ++i) {
    *p++ = uint8_t(r.labels[i].size());
    std::memcpy(p, r.labels[i].data(), r.labels[i].size());
    p += r.labels[i].size();
  }
  used_ += need;
  ++count_;
  return true;
}

size_t LabelledFrameBuilder::finish(uint64_t sender_id, uint32_t sequence,
                                    uint64_t base_timestamp_ns) {
  if (count_ == 0 || out_.size() < kHeaderSize + kSamplesPrefix) return 0;
  putU64(out_.data() + kHeaderSize, base_timestamp_ns);
  return finishFrame(out_, FrameKind::kLabelledSamples, sender_id, sequence, count_, used_);
}

LabelledRecord LabelledSamplesView::next(size_t& offset) const {
  const uint8_t* p = records.data() + offset;
  LabelledRecord r;
  r.metric = LabelledMetricId(getU16(p));
  r.type = SampleType(p[2]);
  r.label_count = p[3];
  r.offset_us = getU32(p + 4);
  r.value = getF64(p + 8);
  p += kLabelledRecordFixed;
  for (size_t i = 0; i < r.label_count; ++i) {
    size_t n = *p++;
    r.labels[i] = std::string_view(reinterpret_cast<const char*>(p), n);
    p += n;
  }
  offset = size_t(p - records.data());
  return r;
}

DecodeError decodeLabelledSamples(const FrameView& frame, LabelledSamplesView& out) {
  if (frame.body.size() < kSamplesPrefix) return DecodeError::kTruncated;
  const uint8_t* p = frame.body.data() + kSamplesPrefix;
  const uint8_t* end = frame.body.data() + frame.body.size();
  for (size_t i = 0; i < frame.header.record_count; ++i) {
    if (p + kLabelledRecordFixed > end) return DecodeError::kCountOverrun;
    LabelledMetricInfo info = labelledMetricInfo(LabelledMetricId(getU16(p)));
    if (info.name.empty() || p[2] != uint8_t(info.type)) return DecodeError::kUnknownMetric;
    if (p[3] != info.label_count) return DecodeError::kBadName;
    if (!std::isfinite(getF64(p + 8))) return DecodeError::kNonFinite;
    size_t labels = p[3];
    p += kLabelledRecordFixed;
    for (size_t l = 0; l < labels; ++l) {
      if (p >= end) return DecodeError::kCountOverrun;
      size_t n = *p++;
      if (p + n > end) return DecodeError::kCountOverrun;
      if (!isValidLabelValue(std::string_view(reinterpret_cast<const char*>(p), n)))
        return DecodeError::kBadName;
      p += n;
    }
  }
  if (p != end) return DecodeError::kOversized;
  out.base_timestamp_ns = getU64(frame.body.data());
  out.records = frame.body.subspan(kSamplesPrefix);
  out.count = frame.header.record_count;
  return DecodeError::kNone;
}

size_t ncclControlSigningBytes(std::span<uint8_t> out, const NcclControl& c) {
  uint8_t* p = out.data();
  const uint8_t* end = out.data() + out.size();
  if (!writeName(p, end, c.job) || p + 36 > end) return 0;
  putU64(p, c.epoch);
  putU64(p + 8, c.comm_id);
  putU64(p + 16, c.start_call);
  p[24] = c.collective;
  p[25] = c.algorithm;
  p[26] = c.protocol;
  p[27] = c.channels;
  putU64(p + 28, c.timestamp_ns);
  return size_t(p + 36 - out.data());
}

size_t encodeNcclControl(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                         const NcclControl& c) {
  if (out.size() < kHeaderSize) return 0;
  size_t n = ncclControlSigningBytes(out.subspan(kHeaderSize), c);
  size_t total = kHeaderSize + n + c.mac.size();
  if (n == 0 || total > out.size()) return 0;
  std::memcpy(out.data() + kHeaderSize + n, c.mac.data(), c.mac.size());
  return finishFrame(out, FrameKind::kNcclControl, sender_id, sequence, 0, total);
}

DecodeError decodeNcclControl(const FrameView& frame, NcclControl& out) {
  const uint8_t* p = frame.body.data();
  const uint8_t* end = p + frame.body.size();
  if (DecodeError e = readName(p, end, out.job); e != DecodeError::kNone) return e;
  if (p + 36 + out.mac.size() != end)
    return p + 36 + out.mac.size() > end ? DecodeError::kTruncated : DecodeError::kOversized;
  out.epoch = getU64(p);
  out.comm_id = getU64(p + 8);
  out.start_call = getU64(p + 16);
  out.collective = p[24];
  out.algorithm = p[25];
  out.protocol = p[26];
  out.channels = p[27];
  out.timestamp_ns = getU64(p + 28);
  std::memcpy(out.mac.data(), p + 36, out.mac.size());
  return DecodeError::kNone;
}

}  // namespace bpftrain::wire
