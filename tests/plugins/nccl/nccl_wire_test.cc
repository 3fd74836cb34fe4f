// The two wire kinds the NCCL plugins added (docs/wire-format.md): labelled samples (5) round
// trip and reach the store under job, rank and the catalogue's other labels; malformed ones are
// counted by reason and store nothing; NCCL tuner decisions (6) sign, verify and decode, and the
// collector's ingest drops them as unexpected; hellos keep their source address (where the
// NCCL controller answers) and labelled samples mark the sender as an NCCL plugin rank.
#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

#include "collector/ingest/dispatcher.h"
#include "common/control_frame.h"
#include "common/metric_catalogue.h"
#include "common/wire_format.h"
#include "tests/collector/ingest/fake_store.h"

namespace bpftrain::collector::ingest {
namespace {

using wire::LabelledMetricId;

wire::LabelledRecord record(LabelledMetricId id, double v,
                            std::initializer_list<std::string_view> labels) {
  wire::LabelledRecord r;
  r.metric = id;
  r.type = wire::labelledMetricInfo(id).type;
  r.value = v;
  for (std::string_view l : labels) r.labels[r.label_count++] = l;
  return r;
}

std::vector<uint8_t> frame(uint64_t sender, uint32_t seq,
                           const std::vector<wire::LabelledRecord>& records) {
  std::vector<uint8_t> buf(wire::kMaxFrameSize);
  wire::LabelledFrameBuilder b(buf);
  for (const auto& r : records) EXPECT_TRUE(b.add(r));
  buf.resize(b.finish(sender, seq, 42));
  return buf;
}

std::vector<uint8_t> hello(uint64_t sender, std::string_view job, uint32_t rank) {
  std::vector<uint8_t> buf(512);
  wire::Hello h{job, "gpu-node", rank, 8, 100, {}};
  buf.resize(wire::encodeHello(buf, sender, 0, h));
  return buf;
}

TEST(NcclWire, EveryLabelledMetricIsInTheCatalogueWithItsLabels) {
  for (uint16_t id = 1; id <= uint16_t(LabelledMetricId::kLast); ++id) {
    wire::LabelledMetricInfo info = wire::labelledMetricInfo(LabelledMetricId(id));
    ASSERT_FALSE(info.name.empty()) << id;
    const metrics::MetricDef* def = metrics::find(info.name);
    ASSERT_NE(def, nullptr) << info.name;
    EXPECT_TRUE(def->labels.starts_with("job rank")) << info.name;
    EXPECT_GE(info.label_count, 1u);
    EXPECT_LE(info.label_count, wire::kMaxLabels);
  }
  EXPECT_TRUE(wire::labelledMetricInfo(LabelledMetricId(0)).name.empty());
  EXPECT_TRUE(wire::labelledMetricInfo(LabelledMetricId(999)).name.empty());
}

TEST(NcclWire, LabelledSamplesRoundTrip) {
  auto f = frame(
      7, 3,
      {record(LabelledMetricId::kNcclCollectiveSeconds, 0.5,
              {"00000000feed0001", "allreduce", "ring", "simple"}),
       record(LabelledMetricId::kNcclStepWaitSeconds, 1e-3, {"pxn", "3", "5", "send", "network"})});
  std::span<const uint8_t> d(f);
  wire::FrameView fv;
  ASSERT_EQ(wire::nextFrame(d, fv), wire::DecodeError::kNone);
  EXPECT_EQ(fv.header.kind, wire::FrameKind::kLabelledSamples);
  wire::LabelledSamplesView v;
  ASSERT_EQ(wire::decodeLabelledSamples(fv, v), wire::DecodeError::kNone);
  ASSERT_EQ(v.count, 2u);
  EXPECT_EQ(v.base_timestamp_ns, 42u);
  size_t off = 0;
  wire::LabelledRecord a = v.next(off), b = v.next(off);
  EXPECT_EQ(off, v.records.size());
  EXPECT_EQ(a.metric, LabelledMetricId::kNcclCollectiveSeconds);
  EXPECT_EQ(a.value, 0.5);
  EXPECT_EQ(a.labels[2], "ring");
  EXPECT_EQ(b.label_count, 5u);
  EXPECT_EQ(b.labels[4], "network");
}

TEST(NcclWire, TheBuilderRefusesInvalidLabelsAndCutsFullFrames) {
  std::vector<uint8_t> buf(wire::kMaxFrameSize);
  wire::LabelledFrameBuilder b(buf);
  EXPECT_FALSE(b.add(record(LabelledMetricId::kNcclDecisionsRefused, 1, {"bad label"})));
  EXPECT_FALSE(b.add(record(LabelledMetricId::kNcclDecisionsRefused, 1, {""})));
  EXPECT_FALSE(b.add(record(LabelledMetricId::kNcclDecisionsRefused, 1,
                            {"0123456789012345678901234567890123"})));  // 34 > 32
  size_t added = 0;
  while (b.add(record(LabelledMetricId::kNcclDecisionsRefused, 1, {"late"}))) ++added;
  EXPECT_GT(added, 300u);
  EXPECT_LE(b.finish(1, 1, 0), wire::kMaxFrameSize);
}

class NcclDispatchTest : public ::testing::Test {
 protected:
  testing::FakeStore store_;
  SenderRegistry registry_;
  IngestStats stats_;
  Dispatcher d_{store_, registry_, stats_, 0};
  void send(const std::vector<uint8_t>& b) { d_.handleDatagram(b, 1000); }
  uint64_t errors(DecodeReason r) const { return stats_.decode_errors[size_t(r)].load(); }
  uint64_t dropped(DropReason r) const { return stats_.dropped[size_t(r)].load(); }
};

TEST_F(NcclDispatchTest, LabelledSamplesBecomeSeriesWithJobRankAndTheirLabels) {
  send(hello(5, "llm", 2));
  auto f = frame(5, 1,
                 {record(LabelledMetricId::kNcclCollectives, 3,
                         {"00000000feed0001", "allreduce", "tree", "ll"}),
                  record(LabelledMetricId::kNcclCollectives, 2,
                         {"00000000feed0001", "allreduce", "tree", "ll"}),
                  record(LabelledMetricId::kNcclOutstandingSteps, 4, {"pxn", "0", "1", "recv"})});
  send(f);
  auto c = store_.get(
      "bpftrain_nccl_collectives{algorithm=tree,collective=allreduce,comm=00000000feed0001,"
      "job=llm,protocol=ll,rank=2}");
  EXPECT_EQ(c.kind, window::SeriesKind::kCounter);
  EXPECT_EQ(c.values, (std::vector<double>{3, 2}));
  EXPECT_EQ(store_
                .get("bpftrain_nccl_outstanding_steps{channel=0,comm=pxn,direction=recv,job=llm,"
                     "peer=1,rank=2}")
                .values,
            std::vector<double>{4});
  EXPECT_EQ(stats_.samples[size_t(Protocol::kBinary)].load(), 3u);
  // A new identity for the same sender id gets new series (the cache is keyed by job and rank).
  send(hello(5, "llm", 3));
  send(hello(5, "llm", 3));
  send(
      frame(5, 2, {record(LabelledMetricId::kNcclOutstandingSteps, 1, {"pxn", "0", "1", "recv"})}));
  EXPECT_EQ(store_
                .get("bpftrain_nccl_outstanding_steps{channel=0,comm=pxn,direction=recv,job=llm,"
                     "peer=1,rank=3}")
                .values,
            std::vector<double>{1});
}

TEST_F(NcclDispatchTest, MalformedLabelledFramesAreCountedAndStoreNothing) {
  send(hello(6, "j", 0));
  auto good = frame(6, 1, {record(LabelledMetricId::kNcclDecisionsRefused, 1, {"bad_mac"})});
  send(good);
  const size_t before = store_.seriesCount();
  auto unknown = good;
  wire::putU16(unknown.data() + 32, 999);  // metric id of the first record
  send(unknown);
  auto wrong_type = good;
  wrong_type[34] = uint8_t(wire::SampleType::kGauge);
  send(wrong_type);
  auto wrong_count = good;
  wrong_count[35] = 2;
  send(wrong_count);
  auto bad_value = good;
  bad_value[49] = ' ';  // inside "bad_mac"
  send(bad_value);
  auto overrun = good;
  wire::putU16(overrun.data() + 20, 2);  // claims two records
  send(overrun);
  auto nan = good;
  wire::putF64(nan.data() + 40, std::numeric_limits<double>::quiet_NaN());
  send(nan);
  EXPECT_EQ(errors(DecodeReason::kUnknownMetric), 2u);
  EXPECT_EQ(errors(DecodeReason::kBadName), 2u);
  EXPECT_EQ(errors(DecodeReason::kCountOverrun), 1u);
  EXPECT_EQ(errors(DecodeReason::kNonFinite), 1u);
  EXPECT_EQ(store_.seriesCount(), before);
  // Before any hello: dropped as from an unknown sender.
  send(frame(99, 1, {record(LabelledMetricId::kNcclDecisionsRefused, 1, {"late"})}));
  EXPECT_EQ(dropped(DropReason::kUnknownSender), 1u);
}

TEST_F(NcclDispatchTest, NcclDecisionsSignVerifyAndAreNotIngested) {
  wire::NcclControl c;
  c.job = "llm";
  c.epoch = 9;
  c.comm_id = 0xfeed0001;
  c.start_call = 1234;
  c.collective = 4;
  c.algorithm = 1;
  c.protocol = 2;
  c.channels = 8;
  c.timestamp_ns = 77;
  std::vector<uint8_t> buf(wire::kMaxFrameSize);
  buf.resize(wire::encodeSignedNcclControl(buf, 1, 9, c, "secret"));
  ASSERT_GT(buf.size(), 0u);
  std::span<const uint8_t> d(buf);
  wire::FrameView fv;
  ASSERT_EQ(wire::nextFrame(d, fv), wire::DecodeError::kNone);
  wire::NcclControl out;
  ASSERT_EQ(wire::decodeNcclControl(fv, out), wire::DecodeError::kNone);
  EXPECT_EQ(out.start_call, 1234u);
  EXPECT_EQ(out.comm_id, 0xfeed0001u);
  EXPECT_EQ(out.channels, 8);
  EXPECT_TRUE(wire::verifyNcclControl(out, "secret"));
  EXPECT_FALSE(wire::verifyNcclControl(out, "other"));
  out.start_call = 1235;  // every field is covered by the MAC
  EXPECT_FALSE(wire::verifyNcclControl(out, "secret"));
  auto truncated = buf;
  truncated.pop_back();
  wire::putU16(truncated.data() + 6, uint16_t(truncated.size()));
  std::span<const uint8_t> t(truncated);
  ASSERT_EQ(wire::nextFrame(t, fv), wire::DecodeError::kNone);
  EXPECT_EQ(wire::decodeNcclControl(fv, out), wire::DecodeError::kTruncated);
  send(buf);
  EXPECT_EQ(dropped(DropReason::kUnexpectedKind), 1u);
}

// The NCCL controller answers a plugin at its hello's source address and only steers senders
// whose frames say they are NCCL plugin ranks (labelled samples).
TEST_F(NcclDispatchTest, HellosKeepTheSourceAddressAndLabelledSamplesMarkNcclRanks) {
  SocketAddress from;
  auto* in = reinterpret_cast<sockaddr_in*>(&from.storage);
  in->sin_family = AF_INET;
  in->sin_port = htons(40123);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  from.length = sizeof(sockaddr_in);
  const std::vector<uint8_t> h = hello(7, "llm", 1);
  d_.handleDatagram(h, 1000, &from);
  d_.handleDatagram(hello(8, "trainer", 0), 1000);  // a trainer rank: no labelled samples
  auto find = [&](uint64_t id) {
    for (const Sender& s : registry_.snapshot())
      if (s.sender_id == id) return s;
    return Sender{};
  };
  EXPECT_EQ(find(7).address.str(), "127.0.0.1:40123");
  EXPECT_FALSE(find(7).nccl);
  const uint64_t version = registry_.version();
  send(frame(7, 1, {record(LabelledMetricId::kNcclTunerCalls, 10, {"any"})}));
  EXPECT_TRUE(find(7).nccl);
  EXPECT_GT(registry_.version(), version);
  EXPECT_FALSE(find(8).nccl);
  EXPECT_EQ(find(8).address.length, 0u);
  // A new source port (the rank's process restarted its socket) replaces the old one.
  in->sin_port = htons(40124);
  d_.handleDatagram(h, 2000, &from);
  EXPECT_EQ(find(7).address.str(), "127.0.0.1:40124");
}

}  // namespace
}  // namespace bpftrain::collector::ingest
