#include "common/wire_format.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

namespace bpftrain::wire {
namespace {

std::string toHex(std::span<const uint8_t> bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (uint8_t b : bytes) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::string goldenPath() {
  const char* src = std::getenv("BPFTRAIN_SOURCE_DIR");
  return std::string(src ? src : ".") + "/tests/common/golden/wire_v1.txt";
}

// The golden vectors: name → hex of the encoded frame. BPFTRAIN_UPDATE_GOLDEN=1 rewrites the file.
std::map<std::string, std::string> readGolden() {
  std::map<std::string, std::string> golden;
  std::ifstream in(goldenPath());
  std::string name, hex;
  while (in >> name >> hex) golden[name] = hex;
  return golden;
}

struct Vector {
  std::string name;
  std::vector<uint8_t> bytes;
};

std::vector<Vector> encodeVectors() {
  std::vector<Vector> out;
  std::array<uint8_t, kMaxFrameSize> buf{};
  SampleRecord records[] = {
      {MetricId::kStepSeconds, SampleType::kTimer, 0, 0, 0.125},
      {MetricId::kAllreduceBytes, SampleType::kCounter, 0, 250, 4096},
      {MetricId::kLoss, SampleType::kGauge, 0, 500, -1.5},
  };
  size_t n = encodeSamples(buf, 0x0102030405060708ull, 7, 1'700'000'000'000'000'000ull, records);
  out.push_back({"samples", {buf.begin(), buf.begin() + n}});
  uint32_t tids[] = {100, 101, 102};
  n = encodeHello(buf, 42, 0, Hello{"digits", "node-a", 3, 4, 100, tids});
  out.push_back({"hello", {buf.begin(), buf.begin() + n}});
  Control c{"digits", 5, 2, 1, 123456789, {}};
  for (size_t i = 0; i < c.mac.size(); ++i) c.mac[i] = uint8_t(i);
  n = encodeControl(buf, 9, 11, c);
  out.push_back({"control", {buf.begin(), buf.begin() + n}});
  return out;
}

TEST(WireFormat, GoldenVectors) {
  auto vectors = encodeVectors();
  if (std::getenv("BPFTRAIN_UPDATE_GOLDEN")) {
    std::ofstream f(goldenPath());
    for (auto& v : vectors) f << v.name << ' ' << toHex(v.bytes) << '\n';
  }
  auto golden = readGolden();
  ASSERT_EQ(golden.size(), vectors.size()) << "missing " << goldenPath();
  for (auto& v : vectors) EXPECT_EQ(toHex(v.bytes), golden[v.name]) << v.name;
}

TEST(WireFormat, SamplesRoundTrip) {
  std::array<uint8_t, kMaxFrameSize> buf{};
  std::vector<SampleRecord> records;
  for (uint16_t i = 0; i < kMaxSamplesPerFrame; ++i)
    records.push_back(
        {MetricId(1 + i % uint16_t(MetricId::kLast)), SampleType::kGauge, 0, i, i * 0.5});
  size_t n = encodeSamples(buf, 77, 3, 1000, records);
  ASSERT_GT(n, 0u);
  ASSERT_LE(n, kMaxFrameSize);
  std::span<const uint8_t> dgram(buf.data(), n);
  FrameView frame;
  ASSERT_EQ(nextFrame(dgram, frame), DecodeError::kNone);
  EXPECT_TRUE(dgram.empty());
  EXPECT_EQ(frame.header.kind, FrameKind::kSamples);
  EXPECT_EQ(frame.header.sender_id, 77u);
  EXPECT_EQ(frame.header.sequence, 3u);
  SamplesView view;
  ASSERT_EQ(decodeSamples(frame, view), DecodeError::kNone);
  ASSERT_EQ(view.size(), records.size());
  EXPECT_EQ(view.base_timestamp_ns, 1000u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(view[i].metric, records[i].metric);
    EXPECT_EQ(view[i].offset_us, records[i].offset_us);
    EXPECT_EQ(view[i].value, records[i].value);
  }
  records.push_back(records[0]);
  EXPECT_EQ(encodeSamples(buf, 77, 3, 1000, records), 0u) << "over the per-frame bound";
}

TEST(WireFormat, HelloAndControlRoundTrip) {
  std::array<uint8_t, kMaxFrameSize> buf{};
  uint32_t tids[] = {10, 20};
  size_t n = encodeHello(buf, 1, 2, Hello{"job_1", "host-1.local", 1, 2, 555, tids});
  std::span<const uint8_t> dgram(buf.data(), n);
  FrameView frame;
  ASSERT_EQ(nextFrame(dgram, frame), DecodeError::kNone);
  HelloView hello;
  ASSERT_EQ(decodeHello(frame, hello), DecodeError::kNone);
  EXPECT_EQ(hello.job, "job_1");
  EXPECT_EQ(hello.node, "host-1.local");
  EXPECT_EQ(hello.pid, 555u);
  ASSERT_EQ(hello.tidCount(), 2u);
  EXPECT_EQ(hello.tid(1), 20u);

  Control c{"job_1", 9, 3, 2, 42, {}};
  c.mac[0] = 0xab;
  n = encodeControl(buf, 1, 3, c);
  dgram = std::span<const uint8_t>(buf.data(), n);
  ASSERT_EQ(nextFrame(dgram, frame), DecodeError::kNone);
  Control d;
  ASSERT_EQ(decodeControl(frame, d), DecodeError::kNone);
  EXPECT_EQ(d.epoch, 9u);
  EXPECT_EQ(d.topology, 3);
  EXPECT_EQ(d.pinning, 2);
  EXPECT_EQ(d.mac, c.mac);
}

TEST(WireFormat, RejectsBadInput) {
  std::array<uint8_t, kMaxFrameSize> buf{};
  SampleRecord r{MetricId::kLoss, SampleType::kGauge, 0, 0, 1.0};
  size_t n = encodeSamples(buf, 1, 1, 0, std::span(&r, 1));
  auto decodeAll = [&](std::vector<uint8_t> bytes) {
    std::span<const uint8_t> d(bytes);
    FrameView f;
    DecodeError e = nextFrame(d, f);
    if (e != DecodeError::kNone) return e;
    SamplesView v;
    return decodeSamples(f, v);
  };
  std::vector<uint8_t> good(buf.begin(), buf.begin() + n);
  EXPECT_EQ(decodeAll(good), DecodeError::kNone);
  auto bad = good;
  bad[0] ^= 1;
  EXPECT_EQ(decodeAll(bad), DecodeError::kBadMagic);
  bad = good;
  bad[4] = 2;
  EXPECT_EQ(decodeAll(bad), DecodeError::kBadVersion);
  bad = good;
  bad[5] = 99;
  EXPECT_EQ(decodeAll(bad), DecodeError::kUnknownKind);
  EXPECT_EQ(decodeAll({good.begin(), good.end() - 1}), DecodeError::kTruncated);
  bad = good;
  putU16(bad.data() + 20, 2);  // claims two records, carries one
  EXPECT_EQ(decodeAll(bad), DecodeError::kCountOverrun);
  bad = good;
  putU16(bad.data() + 6, uint16_t(kMaxFrameSize + 1));
  EXPECT_EQ(decodeAll(bad), DecodeError::kOversized);
  bad = good;
  putF64(bad.data() + kHeaderSize + 8 + 8, std::nan(""));
  EXPECT_EQ(decodeAll(bad), DecodeError::kNonFinite);
  bad = good;
  putU16(bad.data() + kHeaderSize + 8, 999);
  EXPECT_EQ(decodeAll(bad), DecodeError::kUnknownMetric);
  EXPECT_EQ(encodeHello(buf, 1, 1, Hello{"bad name!", "n", 0, 1, 1, {}}), 0u);
}

}  // namespace
}  // namespace bpftrain::wire
