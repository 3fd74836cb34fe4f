#include "collector/ingest/dispatcher.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "tests/collector/ingest/fake_store.h"

namespace bpftrain::collector::ingest {
namespace {

using testing::FakeSeries;
using testing::FakeStore;
using wire::MetricId;
using wire::SampleRecord;
using wire::SampleType;

std::vector<uint8_t> hello(uint64_t sender, uint32_t seq, std::string_view job, uint32_t rank) {
  std::vector<uint8_t> buf(512);
  uint32_t tids[] = {100, 101};
  wire::Hello h{job, "node-a", rank, 4, 100, tids};
  buf.resize(wire::encodeHello(buf, sender, seq, h));
  return buf;
}

std::vector<uint8_t> samplesFrame(uint64_t sender, uint32_t seq, std::vector<SampleRecord> recs) {
  std::vector<uint8_t> buf(wire::kMaxFrameSize);
  buf.resize(wire::encodeSamples(buf, sender, seq, 123, recs));
  return buf;
}

std::span<const uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

class DispatcherTest : public ::testing::Test {
 protected:
  FakeStore store_;
  SenderRegistry registry_;
  IngestStats stats_;
  Dispatcher d_{store_, registry_, stats_, 0};

  uint64_t errors(DecodeReason r) const { return stats_.decode_errors[size_t(r)].load(); }
  uint64_t dropped(DropReason r) const { return stats_.dropped[size_t(r)].load(); }
  uint64_t samples(Protocol p) const { return stats_.samples[size_t(p)].load(); }
  void send(std::span<const uint8_t> b) { d_.handleDatagram(b, 1000); }
  void send(std::string_view s) { d_.handleDatagram(bytes(s), 1000); }
};

TEST_F(DispatcherTest, BinarySamplesBecomeLabelledSeries) {
  send(hello(7, 0, "digits", 3));
  send(samplesFrame(7, 1,
                    {{MetricId::kStepSeconds, SampleType::kTimer, 0, 0, 0.25},
                     {MetricId::kAllreduceBytes, SampleType::kCounter, 0, 5, 4096},
                     {MetricId::kLoss, SampleType::kGauge, 0, 9, 1.5}}));
  FakeSeries step = store_.get("bpftrain_step_seconds{job=digits,rank=3}");
  EXPECT_EQ(step.kind, window::SeriesKind::kDistribution);
  EXPECT_EQ(step.values, std::vector<double>{0.25});
  EXPECT_EQ(store_.get("bpftrain_allreduce_bytes{job=digits,rank=3}").kind,
            window::SeriesKind::kCounter);
  EXPECT_EQ(store_.get("bpftrain_loss{job=digits,rank=3}").values, std::vector<double>{1.5});
  EXPECT_EQ(samples(Protocol::kBinary), 3u);
  EXPECT_EQ(stats_.frames_lost.load(), 0u);
}

TEST_F(DispatcherTest, SamplesBeforeHelloAreDroppedAndCounted) {
  send(samplesFrame(9, 1,
                    {{MetricId::kLoss, SampleType::kGauge, 0, 0, 1},
                     {MetricId::kStep, SampleType::kGauge, 0, 0, 1}}));
  EXPECT_EQ(dropped(DropReason::kUnknownSender), 2u);
  EXPECT_EQ(store_.seriesCount(), 0u);
  send(hello(9, 2, "j", 0));
  send(samplesFrame(9, 3, {{MetricId::kLoss, SampleType::kGauge, 0, 0, 1}}));
  EXPECT_EQ(samples(Protocol::kBinary), 1u);
}

TEST_F(DispatcherTest, SequenceGapsCountAsLost) {
  send(hello(5, 0, "j", 1));
  auto rec = std::vector<SampleRecord>{{MetricId::kStep, SampleType::kGauge, 0, 0, 1}};
  send(samplesFrame(5, 1, rec));
  send(samplesFrame(5, 4, rec));   // 2 and 3 missing
  send(samplesFrame(5, 3, rec));   // late: already counted, not counted again
  send(samplesFrame(5, 4, rec));   // duplicate
  send(samplesFrame(5, 10, rec));  // 5..9 missing
  EXPECT_EQ(stats_.frames_lost.load(), 2u + 5u);
  send(samplesFrame(5, 0, rec));  // late frames from before the gap are not counted again
  send(samplesFrame(5, 1, rec));
  EXPECT_EQ(stats_.frames_lost.load(), 7u);
}

TEST_F(DispatcherTest, SeveralFramesPerDatagram) {
  auto a = hello(1, 0, "j", 0);
  auto b = samplesFrame(1, 1, {{MetricId::kStep, SampleType::kGauge, 0, 0, 7}});
  a.insert(a.end(), b.begin(), b.end());
  send(a);
  EXPECT_EQ(store_.get("bpftrain_step{job=j,rank=0}").values, std::vector<double>{7});
}

TEST_F(DispatcherTest, TopologyAndPinningInfoFollowTheCurrentValue) {
  send(hello(2, 0, "j", 0));
  send(samplesFrame(2, 1,
                    {{MetricId::kTopology, SampleType::kGauge, 0, 0, 0},
                     {MetricId::kPinning, SampleType::kGauge, 0, 0, 3}}));
  send(samplesFrame(2, 2, {{MetricId::kTopology, SampleType::kGauge, 0, 0, 2}}));
  EXPECT_EQ(store_.get("bpftrain_topology_info{job=j,rank=0,topology=ring}").values,
            (std::vector<double>{1, 0}));
  EXPECT_EQ(store_.get("bpftrain_topology_info{job=j,rank=0,topology=bcube}").values,
            std::vector<double>{1});
  EXPECT_EQ(store_.get("bpftrain_pinning_info{job=j,mode=numa,rank=0}").values,
            std::vector<double>{1});
  EXPECT_EQ(store_.get("bpftrain_topology{job=j,rank=0}").values, (std::vector<double>{0, 2}));
}

TEST_F(DispatcherTest, BadBinaryInputIsCountedByReason) {
  send(hello(3, 0, "j", 0));
  auto good = samplesFrame(3, 1, {{MetricId::kStep, SampleType::kGauge, 0, 0, 1}});
  auto bad_version = good;
  bad_version[4] = 9;
  auto bad_kind = good;
  bad_kind[5] = 77;
  auto truncated = good;
  truncated.resize(good.size() - 3);
  auto overrun = good;
  overrun[20] = 200;  // record count far beyond the body
  auto nan = samplesFrame(
      3, 2,
      {{MetricId::kStep, SampleType::kGauge, 0, 0, std::numeric_limits<double>::quiet_NaN()}});
  auto inf = samplesFrame(
      3, 3, {{MetricId::kStep, SampleType::kGauge, 0, 0, std::numeric_limits<double>::infinity()}});
  auto unknown_metric = good;
  unknown_metric[32] = 0xee;
  auto oversized = good;
  wire::putU16(oversized.data() + 6, uint16_t(wire::kMaxFrameSize + 1));
  send(bad_version);
  send(bad_kind);
  send(truncated);
  send(overrun);
  send(nan);
  send(inf);
  send(unknown_metric);
  send(oversized);
  EXPECT_EQ(errors(DecodeReason::kBadVersion), 1u);
  EXPECT_EQ(errors(DecodeReason::kUnknownKind), 1u);
  EXPECT_EQ(errors(DecodeReason::kTruncated), 1u);
  EXPECT_EQ(errors(DecodeReason::kCountOverrun), 1u);
  EXPECT_EQ(errors(DecodeReason::kNonFinite), 2u);
  EXPECT_EQ(errors(DecodeReason::kUnknownMetric), 1u);
  EXPECT_EQ(errors(DecodeReason::kOversized), 1u);
  EXPECT_EQ(samples(Protocol::kBinary), 0u);
  EXPECT_EQ(store_.records(), 0u);
}

TEST_F(DispatcherTest, ControlAndSummaryFramesWithoutHandlerAreDropped) {
  std::vector<uint8_t> buf(256);
  wire::Control c{"j", 1, 0, 0, 5, {}};
  buf.resize(wire::encodeControl(buf, 1, 1, c));
  send(buf);
  EXPECT_EQ(dropped(DropReason::kUnexpectedKind), 1u);
}

TEST_F(DispatcherTest, StatsdLinesMapLikeStatsdExporter) {
  send(
      "api.requests:2|c|@0.5\napi.requests_total:1|c\nlat-ms:250|ms|#route:/x,code:200\n"
      "q:7|g\nq:+3|g\nq:-1|g\nsize:42|h\n");
  FakeSeries req = store_.get("api_requests{}");
  EXPECT_EQ(req.kind, window::SeriesKind::kCounter);
  EXPECT_EQ(req.values, (std::vector<double>{4, 1}));  // 2 at @0.5 counts 4; _total not doubled
  FakeSeries lat = store_.get("lat_ms{code=200,route=/x}");
  EXPECT_EQ(lat.kind, window::SeriesKind::kDistribution);
  EXPECT_EQ(lat.values, std::vector<double>{0.25});  // ms -> seconds
  EXPECT_EQ(store_.get("q{}").values, (std::vector<double>{7, 10, 9}));
  EXPECT_EQ(store_.get("size{}").values, std::vector<double>{42});
  EXPECT_EQ(samples(Protocol::kStatsd), 7u);
}

// What real clients send (python-statsd, hot-shots, datadog, telegraf): sets, gauge deltas,
// DogStatsD extensions, value-less tags and the name-embedded tag styles.
TEST_F(DispatcherTest, StatsdAsClientsSpeakIt) {
  send(
      "users:alice|s\nusers:bob|s\nusers:alice|s\n"
      "temp:0|g\ntemp:-5|g\ntemp:+2.5|g\n"
      "hits:1|c|#env:prod,canary|c:abc123|T1656581400\n"
      "_e{5,4}:title|text|#env:prod\n_sc|db.up|0\n"
      "api.req#env=prod,host=h1:2|c\ncpu,host=a:0.5|g\napi[dc=x].lat:12|ms\n");
  EXPECT_EQ(store_.get("users{}").kind, window::SeriesKind::kGauge);
  EXPECT_EQ(store_.get("users{}").values, (std::vector<double>{1, 2, 2}));
  EXPECT_EQ(store_.get("temp{}").values, (std::vector<double>{0, -5, -2.5}));
  EXPECT_EQ(store_.get("hits{container_id=abc123,env=prod}").values, std::vector<double>{1});
  EXPECT_EQ(store_.get("api_req{env=prod,host=h1}").values, std::vector<double>{2});
  EXPECT_EQ(store_.get("cpu{host=a}").values, std::vector<double>{0.5});
  EXPECT_EQ(store_.get("api_lat{dc=x}").values, std::vector<double>{0.012});
  EXPECT_EQ(samples(Protocol::kStatsd), 10u);
  EXPECT_EQ(stats_.ignored[size_t(IgnoredReason::kEvent)].load(), 1u);
  EXPECT_EQ(stats_.ignored[size_t(IgnoredReason::kServiceCheck)].load(), 1u);
  EXPECT_EQ(stats_.ignored[size_t(IgnoredReason::kValuelessTag)].load(), 1u);
  uint64_t errs = 0;
  for (auto& e : stats_.decode_errors) errs += e.load();
  EXPECT_EQ(errs, 0u);
}

// Two dispatchers (two ingest threads) sharing one StatsdState: deltas and set members from
// clients on either thread land on the same value.
TEST_F(DispatcherTest, GaugesAndSetsAgreeAcrossIngestThreads) {
  DispatchOptions shared;
  shared.statsd_state = std::make_shared<StatsdState>(store_.config());
  IngestStats s1, s2;
  Dispatcher a(store_, registry_, s1, 0, shared), b(store_, registry_, s2, 1, shared);
  a.handleDatagram(bytes("inflight:+1|g\nseen:x|s"), 1000);
  b.handleDatagram(bytes("inflight:+1|g\nseen:y|s\nseen:x|s"), 1001);
  a.handleDatagram(bytes("inflight:-1|g"), 1002);
  EXPECT_EQ(store_.get("inflight{}").values, (std::vector<double>{1, 2, 1}));
  EXPECT_EQ(store_.get("seen{}").values, (std::vector<double>{1, 2, 2}));
  // A new step: the refresh writes the count again (members still in the window).
  a.tick(int64_t(3) * 500'000'000);
  EXPECT_EQ(store_.get("seen{}").values.back(), 2);
}

TEST_F(DispatcherTest, SampledTimersAreReplayedBoundedTimes) {
  send("t:100|ms|@0.25");
  EXPECT_EQ(store_.get("t{}").values.size(), 4u);
  send("t:100|ms|@0.00001");
  EXPECT_EQ(store_.get("t{}").values.size(), 4u + kMaxTimerRepeat);
}

TEST_F(DispatcherTest, BadStatsdCountedAndOtherLinesKept) {
  send("good:1|c\nbad name:1|c\nx:1|c|#a:1,a:2\ny:1|c|#__r:1\nz:nan|g\nw:1|q\ngood:2|c");
  EXPECT_EQ(store_.get("good{}").values, (std::vector<double>{1, 2}));
  EXPECT_EQ(errors(DecodeReason::kBadName), 1u);
  EXPECT_EQ(errors(DecodeReason::kBadTag), 2u);
  EXPECT_EQ(errors(DecodeReason::kNonFinite), 1u);
  EXPECT_EQ(errors(DecodeReason::kBadType), 1u);
  EXPECT_EQ(samples(Protocol::kStatsd), 2u);
}

TEST_F(DispatcherTest, SeriesLimitDropsAndCounts) {
  FakeStore small(2);
  IngestStats stats;
  Dispatcher d(small, registry_, stats, 0);
  d.handleDatagram(bytes("a:1|c\nb:1|c\nc:1|c\nc:1|c"), 1);
  EXPECT_EQ(stats.dropped[size_t(DropReason::kSeriesLimit)].load(), 2u);
  EXPECT_EQ(small.seriesCount(), 2u);
}

TEST(SenderRegistryTest, HelloRegistersAndVersionTracksChanges) {
  SenderRegistry reg(2);
  auto h = hello(11, 0, "digits", 5);
  std::span<const uint8_t> dg(h);
  wire::FrameView f;
  ASSERT_EQ(wire::nextFrame(dg, f), wire::DecodeError::kNone);
  wire::HelloView hv;
  ASSERT_EQ(wire::decodeHello(f, hv), wire::DecodeError::kNone);
  EXPECT_TRUE(reg.update(11, hv, 10));
  uint64_t v = reg.version();
  EXPECT_TRUE(reg.update(11, hv, 20));  // same hello again: no change
  EXPECT_EQ(reg.version(), v);
  std::string job, rank;
  ASSERT_TRUE(reg.labelsOf(11, job, rank));
  EXPECT_EQ(job, "digits");
  EXPECT_EQ(rank, "5");
  EXPECT_FALSE(reg.labelsOf(12, job, rank));
  auto snap = reg.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  EXPECT_EQ(snap[0].pid, 100);
  EXPECT_EQ(snap[0].tids, (std::vector<pid_t>{100, 101}));
  EXPECT_EQ(snap[0].last_seen_ns, 20);
  EXPECT_TRUE(reg.update(12, hv, 1));
  EXPECT_FALSE(reg.update(13, hv, 1));  // full
  EXPECT_GT(reg.version(), v);
}

// Issue 14, bounded memory: senders of jobs that ended leave the registry (expireIdle) and,
// with it, every dispatcher's table, however many come and go; a sender still saying hello stays.
TEST(SenderRegistryTest, IdleSendersExpireAndDispatchersForgetThem) {
  FakeStore store;
  SenderRegistry registry;
  IngestStats stats;
  Dispatcher d(store, registry, stats, 0);
  for (int round = 0; round < 20; ++round) {
    const int64_t t = int64_t(round) * 1'000'000;
    for (uint64_t s = 0; s < 500; ++s) {  // a job of 500 ranks, new sender ids every round
      const uint64_t id = uint64_t(round) * 1000 + s;
      d.handleDatagram(hello(id, 0, "short", uint32_t(s)), t);
      d.handleDatagram(samplesFrame(id, 1, {{MetricId::kLoss, SampleType::kGauge, 0, 0, 1}}), t);
    }
    d.handleDatagram(hello(999'999, uint32_t(round), "long", 0), t);  // one rank that stays
    registry.expireIdle(t);  // forgets the rounds before this one
    EXPECT_LE(registry.size(), 501u);
  }
  d.handleDatagram(samplesFrame(999'999, 100, {{MetricId::kLoss, SampleType::kGauge, 0, 0, 2}}),
                   20'000'000);
  EXPECT_EQ(registry.size(), 501u);  // the last round and the long-lived rank
  EXPECT_EQ(d.cachedSenders(), 501u);
  EXPECT_EQ(stats.dropped[size_t(DropReason::kUnknownSender)].load(), 0u);
  std::string job, rank;
  EXPECT_TRUE(registry.labelsOf(999'999, job, rank));
  EXPECT_FALSE(registry.labelsOf(0, job, rank));
  EXPECT_EQ(registry.expireIdle(30'000'000), 501u);
  EXPECT_EQ(registry.size(), 0u);
}

// Issue 2, bad input: 100,000 random and mutated datagrams, then valid traffic that must be
// aggregated exactly, with nothing crashing on the way.
void fuzzThenValid(window::SeriesStore& store, const std::function<void()>& check) {
  SenderRegistry registry;
  IngestStats stats;
  Dispatcher d(store, registry, stats, 0);
  std::mt19937_64 rng(20261201);
  std::vector<std::vector<uint8_t>> seeds;
  seeds.push_back(hello(1, 0, "fuzz", 0));
  seeds.push_back(samplesFrame(1, 1,
                               {{MetricId::kStepSeconds, SampleType::kTimer, 0, 0, 0.5},
                                {MetricId::kLoss, SampleType::kGauge, 0, 0, 2}}));
  for (std::string_view s :
       {"fuzz.a:1|c|@0.5|#k:v,k2:v2\nfuzz.b:2.5|ms\n", "fuzz.g:+1|g", "fuzz.h:3|h|#x:y"})
    seeds.emplace_back(s.begin(), s.end());
  std::vector<uint8_t> dg;
  for (int i = 0; i < 100'000; ++i) {
    int mode = int(rng() % 4);
    if (mode == 0) {  // random bytes, sometimes with the magic in front
      dg.resize(rng() % 600);
      for (auto& b : dg) b = uint8_t(rng());
      if (dg.size() >= 4 && rng() % 2) wire::putU32(dg.data(), wire::kMagic);
    } else {  // a valid frame or line, mutated: flipped bytes, truncation, junk appended
      dg = seeds[rng() % seeds.size()];
      int flips = 1 + int(rng() % 4);
      for (int f = 0; f < flips && !dg.empty(); ++f) dg[rng() % dg.size()] = uint8_t(rng());
      if (mode == 2) dg.resize(rng() % (dg.size() + 1));
      if (mode == 3) dg.insert(dg.end(), size_t(rng() % 64), uint8_t(rng()));
    }
    d.handleDatagram(dg, 1);
  }
  uint64_t errors = 0;
  for (auto& e : stats.decode_errors) errors += e.load();
  EXPECT_GT(errors, 50'000u);

  // Valid traffic from senders and names the fuzz phase never produced.
  std::string text;
  for (int i = 0; i < 1000; ++i) {
    d.handleDatagram(hello(1000 + i % 10, uint32_t(i), "valid", uint32_t(i % 10)), 2);
    d.handleDatagram(samplesFrame(1000 + i % 10, 100000 + uint32_t(i),
                                  {{MetricId::kStepSeconds, SampleType::kTimer, 0, 0, 0.001 * i}}),
                     2);
    text =
        "valid.count:1|c|#w:" + std::to_string(i % 7) + "\nvalid.ms:" + std::to_string(i) + "|ms";
    d.handleDatagram(bytes(text), 2);
  }
  check();
}

TEST(DispatcherFuzz, HundredThousandBadDatagramsThenExactValidTraffic) {
  FakeStore store;
  fuzzThenValid(store, [&] {
    for (int r = 0; r < 10; ++r) {
      FakeSeries s = store.get("bpftrain_step_seconds{job=valid,rank=" + std::to_string(r) + "}");
      ASSERT_EQ(s.values.size(), 100u) << r;
      for (int k = 0; k < 100; ++k) EXPECT_DOUBLE_EQ(s.values[k], 0.001 * (r + 10 * k));
    }
    uint64_t counted = 0;
    for (int w = 0; w < 7; ++w)
      counted += uint64_t(store.get("valid_count{w=" + std::to_string(w) + "}").sum());
    EXPECT_EQ(counted, 1000u);
    FakeSeries ms = store.get("valid_ms{}");
    ASSERT_EQ(ms.values.size(), 1000u);
    EXPECT_DOUBLE_EQ(ms.sum(), 499.5);  // sum of 0..999 ms in seconds
  });
}

// The same through the real window store: counts, sums and counter totals exact in a snapshot.
TEST(DispatcherFuzz, RealStoreAggregatesValidTrafficExactly) {
  window::WindowConfig wc;
  auto store = window::SeriesStore::create(wc);
  fuzzThenValid(*store, [&] {
    uint64_t step_count = 0, counter_total = 0, ms_count = 0;
    double step_sum = 0, ms_sum = 0;
    for (const auto& s : store->snapshot(3)) {
      bool valid_job = false;
      for (const auto& [k, v] : s.labels) valid_job |= k == "job" && v == "valid";
      if (s.name == "bpftrain_step_seconds" && valid_job) {
        step_count += s.count;
        step_sum += s.sum;
      }
      if (s.name == "valid_count") counter_total += uint64_t(s.total);
      if (s.name == "valid_ms") {
        ms_count += s.count;
        ms_sum += s.sum;
      }
    }
    EXPECT_EQ(step_count, 1000u);
    EXPECT_NEAR(step_sum, 0.001 * 999 * 1000 / 2, 1e-9);
    EXPECT_EQ(counter_total, 1000u);
    EXPECT_EQ(ms_count, 1000u);
    EXPECT_NEAR(ms_sum, 499.5, 1e-9);
  });
}

}  // namespace
}  // namespace bpftrain::collector::ingest
