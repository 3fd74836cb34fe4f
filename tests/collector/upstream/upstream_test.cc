#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <new>
#include <random>
#include <string>
#include <vector>

#include "collector/upstream/forwarder.h"
#include "collector/upstream/summary_codec.h"
#include "tests/support/allocation_counter.h"
#include "tests/support/loopback.h"

namespace bpftrain::collector::upstream {
namespace {

using window::Label;
using window::SeriesKind;
using window::SeriesSnapshot;
using window::SeriesStore;
using wire::DecodeError;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;

window::WindowConfig config(int writers = 1) {
  window::WindowConfig c;
  c.window = std::chrono::seconds(5);
  c.step = std::chrono::milliseconds(500);
  c.writers = writers;
  return c;
}

// A UDP socket on 127.0.0.1, port 0: the parent collector's ingest port in these tests.
class Receiver {
 public:
  Receiver() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int big = 8 << 20;
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
    bpftrain::testing::bindLoopbackPort0(fd_, &port_);
  }
  ~Receiver() { close(fd_); }
  std::string target() const { return "127.0.0.1:" + std::to_string(port_); }

  // Applies every frame of every datagram until `frames` frames arrived or the deadline passed.
  size_t applyUntil(size_t frames, SeriesStore& store, int64_t now_ns,
                    std::chrono::seconds deadline = std::chrono::seconds(10)) {
    auto end = std::chrono::steady_clock::now() + deadline;
    std::vector<uint8_t> buf(wire::kMaxDatagramSize);
    while (applied_ < frames && std::chrono::steady_clock::now() < end) {
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, 50) <= 0) continue;
      ssize_t n = recv(fd_, buf.data(), buf.size(), 0);
      if (n <= 0) continue;
      std::span<const uint8_t> dgram(buf.data(), size_t(n));
      wire::FrameView frame;
      while (!dgram.empty() && wire::nextFrame(dgram, frame) == DecodeError::kNone) {
        EXPECT_EQ(frame.header.kind, wire::FrameKind::kWindowSummary);
        EXPECT_EQ(applySummary(frame, store, 0, now_ns), DecodeError::kNone);
        ++applied_;
      }
    }
    return applied_;
  }

 private:
  int fd_;
  uint16_t port_ = 0;
  size_t applied_ = 0;
};

double exactQuantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[size_t(std::floor(q * double(v.size() - 1)))];
}

// Child stores -> real UDP on loopback -> parent store: counts exact, quantiles within 1%.
TEST(Upstream, ChildrenMergeIntoParentOverUdp) {
  Receiver parent_port;
  auto parent = SeriesStore::create(config());
  std::mt19937_64 rng(1);
  std::vector<double> all;
  double counter_total = 0;
  uint64_t frames = 0;
  const int64_t t0 = 4000 * kSec;
  std::vector<std::unique_ptr<SeriesStore>> children;
  for (int child = 0; child < 3; ++child) {
    children.push_back(SeriesStore::create(config(2)));
    SeriesStore& store = *children.back();
    Label labels[] = {{"job", "train"}, {"op", "allreduce"}};
    auto d = store.lookup("bpftrain_allreduce_seconds", labels, SeriesKind::kDistribution);
    auto c = store.lookup("bpftrain_allreduce_bytes", labels, SeriesKind::kCounter);
    std::string rank = std::to_string(child);
    Label own[] = {{"rank", rank}};
    auto g = store.lookup("bpftrain_loss", own, SeriesKind::kGauge);
    // Different shapes per child: lognormal, uniform, bimodal; three steps each.
    for (int i = 0; i < 3000; ++i) {
      double v = child == 0 ? std::lognormal_distribution<>(-3, 1)(rng)
                 : child == 1
                     ? std::uniform_real_distribution<>(0.01, 0.2)(rng)
                     : (i % 2 ? 0.005 : 2.0) * std::uniform_real_distribution<>(1, 1.1)(rng);
      int64_t t = t0 + (i % 3) * 500 * kMs + i * 100'000;
      store.record(i % 2, d, v, t);
      store.record(i % 2, c, 1024, t);
      store.record(i % 2, g, child + i * 1e-3, t);
      all.push_back(v);
      counter_total += 1024;
    }
    std::string error;
    UpstreamOptions options;
    options.target = parent_port.target();
    options.sender_id = 100 + uint64_t(child);
    auto fwd = UpstreamForwarder::create(store, options, error);
    ASSERT_TRUE(fwd) << error;
    for (int s = 0; s < 3; ++s) EXPECT_EQ(fwd->forwardStep(store.stepOf(t0) + s), 3u);
    UpstreamStats st = fwd->stats();
    EXPECT_EQ(st.frames_dropped + st.send_errors + st.series_oversized, 0u);
    EXPECT_EQ(st.series_sent, 9u);
    EXPECT_EQ(st.steps_sent, 3u);
    frames += st.frames_sent;
  }
  const int64_t parent_now = 9000 * kSec;
  ASSERT_EQ(parent_port.applyUntil(frames, *parent, parent_now), frames);

  ASSERT_EQ(parent->seriesCount(), 5u);  // one distribution, one counter, three gauges
  Label labels[] = {{"job", "train"}, {"op", "allreduce"}};
  SeriesSnapshot d = parent->snapshotOne(
      parent->lookup("bpftrain_allreduce_seconds", labels, SeriesKind::kDistribution), parent_now);
  EXPECT_EQ(d.count, all.size());
  double sum = 0;
  for (double v : all) sum += v;
  EXPECT_NEAR(d.sum, sum, 1e-9 * sum);
  EXPECT_EQ(d.min, *std::min_element(all.begin(), all.end()));
  EXPECT_EQ(d.max, *std::max_element(all.begin(), all.end()));
  for (auto [q, v] : d.quantiles) {
    double exact = exactQuantile(all, q);
    EXPECT_LE(std::abs(v - exact), 0.01 * exact * (1 + 1e-9)) << q << " exact " << exact;
  }
  SeriesSnapshot c = parent->snapshotOne(
      parent->lookup("bpftrain_allreduce_bytes", labels, SeriesKind::kCounter), parent_now);
  EXPECT_EQ(c.total, counter_total);
  EXPECT_EQ(c.count, 9000u);
  Label rank2[] = {{"rank", "2"}};
  SeriesSnapshot g =
      parent->snapshotOne(parent->lookup("bpftrain_loss", rank2, SeriesKind::kGauge), parent_now);
  EXPECT_EQ(g.count, 3000u);
  EXPECT_DOUBLE_EQ(g.max, 2 + 2999 * 1e-3);
}

TEST(Upstream, BackgroundThreadForwardsEachStep) {
  Receiver parent_port;
  window::WindowConfig c = config();
  c.step = std::chrono::milliseconds(100);
  c.window = std::chrono::seconds(1);
  auto child = SeriesStore::create(c);
  auto parent = SeriesStore::create(c);
  auto id = child->lookup("bpftrain_samples", {}, SeriesKind::kCounter);
  std::string error;
  UpstreamOptions options;
  options.target = parent_port.target();
  options.delay = std::chrono::milliseconds(10);
  auto fwd = UpstreamForwarder::create(*child, options, error);
  ASSERT_TRUE(fwd) << error;
  fwd->start();
  // Record until the parent has merged 500 increments (deadline 10 s).
  const int64_t start = window::monotonicNowNs();
  for (int i = 0; i < 500; ++i) child->record(0, id, 1, window::monotonicNowNs());
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  double total = 0;
  while (total < 500 && std::chrono::steady_clock::now() < deadline) {
    parent_port.applyUntil(fwd->stats().frames_sent, *parent, window::monotonicNowNs(),
                           std::chrono::seconds(1));
    auto snap = parent->snapshot(window::monotonicNowNs());
    total = snap.empty() ? 0 : snap[0].total;
  }
  fwd->stop();
  EXPECT_EQ(total, 500) << "after " << (window::monotonicNowNs() - start) / kMs << " ms";
  EXPECT_GE(fwd->stats().steps_sent, 1u);
}

// A step's frames as the forwarder would send them, without a socket.
std::vector<std::vector<uint8_t>> encodeStep(const SeriesStore& store, int64_t step,
                                             size_t* oversized = nullptr) {
  std::vector<std::vector<uint8_t>> frames;
  SummaryFramer framer(
      7, [&](std::span<const uint8_t> f) { frames.emplace_back(f.begin(), f.end()); });
  framer.begin(step, store.config().step.count());
  store.visitStep(step, [&](const window::StepSummary& s) {
    if (!framer.add(s) && oversized) ++*oversized;
  });
  framer.flush();
  return frames;
}

DecodeError applyFrame(std::span<const uint8_t> bytes, SeriesStore& store) {
  wire::FrameView frame;
  if (DecodeError e = wire::nextFrame(bytes, frame); e != DecodeError::kNone) return e;
  return applySummary(frame, store, 0, 100 * kSec);
}

std::unique_ptr<SeriesStore> sampleChild(int series) {
  auto child = SeriesStore::create(config());
  for (int s = 0; s < series; ++s) {
    std::string v = std::to_string(s);
    Label l[] = {{"rank", v}};
    auto d = child->lookup("bpftrain_step_seconds", l, SeriesKind::kDistribution);
    auto c = child->lookup("bpftrain_steps", l, SeriesKind::kCounter);
    for (int i = 1; i <= 20; ++i) {
      child->record(0, d, i * 0.01 * (s + 1), 10 * kSec + i);
      child->record(0, c, 1, 10 * kSec + i);
    }
  }
  return child;
}

TEST(Upstream, FramesStayWithinTheFrameSizeAndSplitAcrossFrames) {
  auto child = sampleChild(200);
  auto frames = encodeStep(*child, child->stepOf(10 * kSec));
  ASSERT_GT(frames.size(), 1u);
  auto parent = SeriesStore::create(config());
  for (auto& f : frames) {
    EXPECT_LE(f.size(), wire::kMaxFrameSize);
    EXPECT_EQ(applyFrame(f, *parent), DecodeError::kNone);
  }
  EXPECT_EQ(parent->seriesCount(), 400u);
  uint64_t counts = 0;
  for (auto& s : parent->snapshot(100 * kSec)) counts += s.count;
  EXPECT_EQ(counts, 400u * 20);
}

TEST(Upstream, MergingAKnownSeriesAllocatesNothing) {
  if (!kCountsAllocations) GTEST_SKIP() << "allocations are not counted under TSan";
  auto child = sampleChild(20);
  auto frames = encodeStep(*child, child->stepOf(10 * kSec));
  ASSERT_EQ(frames.size(), 1u);
  auto parent = SeriesStore::create(config());
  ASSERT_EQ(applyFrame(frames[0], *parent), DecodeError::kNone);  // creates and sizes
  g_allocations = 0;
  g_counting = true;
  int ok = 0;
  for (int i = 0; i < 100; ++i) ok += applyFrame(frames[0], *parent) == DecodeError::kNone;
  g_counting = false;
  EXPECT_EQ(ok, 100);
  EXPECT_EQ(g_allocations.load(), 0);
  uint64_t count = 0;
  for (auto& s : parent->snapshot(100 * kSec)) count += s.count;
  EXPECT_EQ(count, 101u * 40 * 20);
}

TEST(Upstream, SeriesTooLargeForAFrameIsCountedNotSent) {
  auto child = SeriesStore::create(config());
  std::string longv(250, 'v');
  std::vector<std::string> names;
  for (int i = 0; i < 16; ++i) names.push_back("label_" + std::to_string(i));
  std::vector<Label> labels;
  for (auto& n : names) labels.push_back({n, longv});
  auto big = child->lookup("bpftrain_big", labels, SeriesKind::kDistribution);
  // A sketch spanning many bins on top of ~4 KB of labels.
  for (int i = 0; i < 2000; ++i) child->record(0, big, std::pow(1.0203, i), 10 * kSec);
  auto small = child->lookup("bpftrain_small", {}, SeriesKind::kGauge);
  child->record(0, small, 1, 10 * kSec);
  size_t oversized = 0;
  auto frames = encodeStep(*child, child->stepOf(10 * kSec), &oversized);
  EXPECT_EQ(oversized, 1u);
  ASSERT_EQ(frames.size(), 1u);
  auto parent = SeriesStore::create(config());
  EXPECT_EQ(applyFrame(frames[0], *parent), DecodeError::kNone);
  EXPECT_EQ(parent->seriesCount(), 1u);
}

TEST(Upstream, FullSocketDropsAndCounts) {
  // Loopback UDP never pushes back on the sender (the receiver drops instead), so the full
  // socket is a unix datagram pair nobody reads: it queues net.unix.max_dgram_qlen datagrams
  // and then refuses with EAGAIN.
  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, sv), 0);
  auto child = sampleChild(2000);
  UpstreamOptions options;
  options.target = "unix-socketpair";
  auto fwd = UpstreamForwarder::adopt(*child, sv[0], options);
  const size_t frames = encodeStep(*child, child->stepOf(10 * kSec)).size();
  ASSERT_GT(frames, 20u);
  fwd->forwardStep(child->stepOf(10 * kSec));
  UpstreamStats s = fwd->stats();
  EXPECT_GT(s.frames_dropped, 0u);
  EXPECT_GT(s.frames_sent, 0u);
  EXPECT_EQ(s.send_errors, 0u);
  EXPECT_EQ(s.frames_sent + s.frames_dropped, frames);
  // What was queued is what was counted as sent.
  size_t queued = 0;
  std::vector<uint8_t> buf(wire::kMaxFrameSize);
  while (recv(sv[1], buf.data(), buf.size(), MSG_DONTWAIT) > 0) ++queued;
  EXPECT_EQ(queued, s.frames_sent);
  close(sv[1]);
  auto families = fwd->collectable()->Collect();
  ASSERT_EQ(families.size(), 3u);
  EXPECT_EQ(families[0].name, "bpftrain_collector_upstream_frames_total");
  EXPECT_EQ(families[0].metric[1].label[0].value, "dropped");
  EXPECT_EQ(families[0].metric[1].counter.value, double(s.frames_dropped));
}

TEST(Upstream, BadTargetsNameTheFix) {
  auto store = SeriesStore::create(config());
  for (const char* bad : {"", "127.0.0.1", "127.0.0.1:0", "127.0.0.1:70000", "[::1:9470",
                          "no-such-host.invalid:9470"}) {
    std::string error;
    UpstreamOptions o;
    o.target = bad;
    EXPECT_FALSE(UpstreamForwarder::create(*store, o, error)) << bad;
    EXPECT_FALSE(error.empty());
  }
}

TEST(Upstream, BadInputIsRejectedAndNothingIsMerged) {
  auto child = sampleChild(3);
  auto frames = encodeStep(*child, child->stepOf(10 * kSec));
  ASSERT_EQ(frames.size(), 1u);
  const std::vector<uint8_t> good = frames[0];
  auto fresh = [] { return SeriesStore::create(config()); };

  // Every shorter frame (header length patched to match) is rejected and merges nothing.
  for (size_t n = wire::kHeaderSize; n < good.size(); ++n) {
    std::vector<uint8_t> cut(good.begin(), good.begin() + long(n));
    wire::putU16(&cut[6], uint16_t(n));
    auto parent = fresh();
    EXPECT_NE(applyFrame(cut, *parent), DecodeError::kNone) << n;
    EXPECT_EQ(parent->seriesCount(), 0u) << n;
  }
  // Record count larger than the body holds.
  std::vector<uint8_t> bad = good;
  wire::putU16(&bad[20], uint16_t(wire::getU16(&good[20]) + 1));
  EXPECT_EQ(applyFrame(bad, *fresh()), DecodeError::kCountOverrun);
  // Trailing bytes after the records.
  bad = good;
  bad.push_back(0);
  wire::putU16(&bad[6], uint16_t(bad.size()));
  EXPECT_EQ(applyFrame(bad, *fresh()), DecodeError::kOversized);
  // Field-level damage in the first record (kind at body offset 16, then name).
  const size_t rec = wire::kHeaderSize + kSummaryPrefixSize;
  bad = good;
  bad[rec] = 9;
  EXPECT_EQ(applyFrame(bad, *fresh()), DecodeError::kUnknownKind);
  bad = good;
  bad[rec + 2] = '-';
  EXPECT_EQ(applyFrame(bad, *fresh()), DecodeError::kBadName);

  // Hand-built records: NaN, min > max, sketch count mismatch, sketch on a gauge.
  auto build = [](SeriesKind kind, uint64_t count, double sum, double min, double max,
                  const window::Sketch* sketch) {
    window::StepSummary s;
    s.name = "bpftrain_x";
    s.kind = kind;
    s.count = count;
    s.sum = sum;
    s.min = min;
    s.max = max;
    s.last = max;
    s.sketch = sketch;
    std::vector<uint8_t> out;
    SummaryFramer f(1, [&](std::span<const uint8_t> b) { out.assign(b.begin(), b.end()); });
    f.begin(0, 500 * kMs);
    f.add(s);
    f.flush();
    return out;
  };
  window::Sketch two;
  two.add(1);
  two.add(2);
  EXPECT_EQ(applyFrame(build(SeriesKind::kDistribution, 2, 3, 1, 2, &two), *fresh()),
            DecodeError::kNone);
  EXPECT_EQ(applyFrame(build(SeriesKind::kGauge, 1, std::nan(""), 1, 1, nullptr), *fresh()),
            DecodeError::kNonFinite);
  EXPECT_EQ(applyFrame(build(SeriesKind::kGauge, 1, 1, 2, 1, nullptr), *fresh()),
            DecodeError::kNonFinite);
  EXPECT_EQ(applyFrame(build(SeriesKind::kGauge, 0, 0, 0, 0, nullptr), *fresh()),
            DecodeError::kNonFinite);
  EXPECT_EQ(applyFrame(build(SeriesKind::kDistribution, 3, 3, 1, 2, &two), *fresh()),
            DecodeError::kCountOverrun);
  EXPECT_EQ(applyFrame(build(SeriesKind::kDistribution, 2, 3, 1, 2, nullptr), *fresh()),
            DecodeError::kCountOverrun);
  {
    // A gauge record that carries a sketch: patch the kind of a valid distribution record.
    std::vector<uint8_t> g = build(SeriesKind::kDistribution, 2, 3, 1, 2, &two);
    g[rec] = uint8_t(SeriesKind::kGauge);
    EXPECT_EQ(applyFrame(g, *fresh()), DecodeError::kOversized);
  }

  // One good record followed by a bad one: the frame is refused as a whole.
  auto two_records = sampleChild(2);
  auto f2 = encodeStep(*two_records, two_records->stepOf(10 * kSec));
  ASSERT_EQ(f2.size(), 1u);
  bad = f2[0];
  bad[bad.size() - 3] ^= 0xff;  // inside the last record's sketch
  auto parent = fresh();
  EXPECT_NE(applyFrame(bad, *parent), DecodeError::kNone);
  EXPECT_EQ(parent->seriesCount(), 0u);

  // Random mutations: never a crash; an accepted frame leaves the store consistent.
  std::mt19937_64 rng(99);
  auto store = fresh();
  size_t accepted = 0;
  for (int i = 0; i < 50'000; ++i) {
    bad = good;
    for (int k = 0; k < 1 + i % 3; ++k)
      bad[wire::kHeaderSize + rng() % (bad.size() - wire::kHeaderSize)] = uint8_t(rng());
    accepted += applyFrame(bad, *store) == DecodeError::kNone;
  }
  for (const SeriesSnapshot& s : store->snapshot(100 * kSec)) {
    EXPECT_TRUE(std::isfinite(s.sum));
    EXPECT_LE(s.min, s.max);
  }
  RecordProperty("accepted_mutations", int(accepted));
}

}  // namespace
}  // namespace bpftrain::collector::upstream
