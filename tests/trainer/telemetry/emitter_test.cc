#include "trainer/telemetry/emitter.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <map>
#include <set>

#include "common/clock.h"
#include "common/wire_format.h"
#include "tests/support/loopback.h"

namespace bpftrain::trainer::telemetry {
namespace {

using wire::MetricId;

// A collector stand-in: a UDP socket on an ephemeral loopback port that decodes frames.
class Receiver {
 public:
  Receiver() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    bpftrain::testing::bindLoopbackPort0(fd_, &port_);
  }
  ~Receiver() { close(fd_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  // Receives until `done` holds or the deadline passes.
  template <typename Done>
  bool receiveUntil(Done done, std::chrono::seconds limit = std::chrono::seconds(10)) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    uint8_t buf[65536];
    while (!done()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(left.count())) <= 0) continue;
      ssize_t n = recv(fd_, buf, sizeof(buf), 0);
      if (n <= 0) continue;
      std::span<const uint8_t> dgram(buf, size_t(n));
      wire::FrameView f;
      while (!dgram.empty()) {
        ASSERT_NE_HELPER(wire::nextFrame(dgram, f));
        senders.insert(f.header.sender_id);
        sequences.push_back(f.header.sequence);
        if (f.header.kind == wire::FrameKind::kHello) {
          wire::HelloView h;
          if (wire::decodeHello(f, h) != wire::DecodeError::kNone) return false;
          ++hellos;
          job = std::string(h.job);
          rank = h.rank;
          world = h.world;
          pid = h.pid;
          tids.clear();
          for (size_t i = 0; i < h.tidCount(); ++i) tids.push_back(h.tid(i));
        } else if (f.header.kind == wire::FrameKind::kSamples) {
          wire::SamplesView s;
          if (wire::decodeSamples(f, s) != wire::DecodeError::kNone) return false;
          for (size_t i = 0; i < s.size(); ++i) {
            wire::SampleRecord r = s[i];
            ++count[r.metric];
            last[r.metric] = r.value;
            if (r.metric == MetricId::kAllreduceBytes) bytes_sum += r.value;
          }
        }
      }
    }
    return true;
  }

  std::set<uint64_t> senders;
  std::vector<uint32_t> sequences;
  int hellos = 0;
  std::string job;
  uint32_t rank = 0, world = 0, pid = 0;
  std::vector<uint32_t> tids;
  std::map<MetricId, int> count;
  std::map<MetricId, double> last;
  double bytes_sum = 0;

 private:
  static void ASSERT_NE_HELPER(wire::DecodeError e) { EXPECT_EQ(e, wire::DecodeError::kNone); }
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(Emitter, SendsHelloStepsAndGaugesThatDecode) {
  Receiver rx;
  EmitterOptions o;
  o.collector = rx.address();
  o.hz = 100;
  o.job = "job1";
  o.rank = 2;
  o.world = 4;
  Emitter e(o);
  e.setThreads({100, 101, 102});
  e.start();
  // Every tenth step ran a ring probe; the others report none.
  for (int i = 0; i < 50; ++i)
    e.pushStep({uint64_t(1'700'000'000'000'000'000ull + uint64_t(i) * 1'000'000), 0.01, 0.004, 1000,
                5e8, i % 10 == 0 ? 0.003 : -1});
  e.setGauge(MetricId::kLoss, 0.25);
  e.setGauge(MetricId::kTopology, 1);
  e.setGauge(MetricId::kConfigEpoch, 7);
  e.setGauge(MetricId::kAnonHugePagesBytes, 4 << 20);
  ASSERT_TRUE(rx.receiveUntil([&] {
    return rx.count[MetricId::kStepSeconds] >= 50 && rx.last.count(MetricId::kConfigEpoch) &&
           rx.hellos > 0 && !rx.tids.empty();
  }));
  e.stop();
  EXPECT_EQ(rx.job, "job1");
  EXPECT_EQ(rx.rank, 2u);
  EXPECT_EQ(rx.world, 4u);
  EXPECT_EQ(rx.pid, uint32_t(getpid()));
  EXPECT_EQ(rx.tids, (std::vector<uint32_t>{100, 101, 102}));
  EXPECT_EQ(rx.count[MetricId::kAllreduceSeconds], 50);
  EXPECT_EQ(rx.count[MetricId::kRingProbeSeconds], 5);
  EXPECT_DOUBLE_EQ(rx.last[MetricId::kRingProbeSeconds], 0.003);
  EXPECT_DOUBLE_EQ(rx.bytes_sum, 50 * 1000.0);
  EXPECT_DOUBLE_EQ(rx.last[MetricId::kLoss], 0.25);
  EXPECT_DOUBLE_EQ(rx.last[MetricId::kTopology], 1);
  EXPECT_DOUBLE_EQ(rx.last[MetricId::kAnonHugePagesBytes], 4 << 20);
  EXPECT_EQ(rx.senders.size(), 1u);
  // One sequence per sender, consecutive: the collector counts gaps as loss.
  for (size_t i = 1; i < rx.sequences.size(); ++i)
    EXPECT_EQ(rx.sequences[i], rx.sequences[i - 1] + 1);
}

// With report_allreduce off (the NCCL profiler plugin reports them per collective), step records
// send their step time and nothing of the allreduce.
TEST(Emitter, StepTimesOnlyWhenAnotherSourceReportsTheAllreduce) {
  Receiver rx;
  EmitterOptions o;
  o.collector = rx.address();
  o.hz = 100;
  o.report_allreduce = false;
  Emitter e(o);
  e.start();
  for (int i = 0; i < 20; ++i)
    e.pushStep(
        {uint64_t(1'700'000'000'000'000'000ull + uint64_t(i) * 1'000'000), 0.01, 0.004, 1000, 5e8});
  e.setGauge(MetricId::kLoss, 0.5);
  ASSERT_TRUE(rx.receiveUntil(
      [&] { return rx.count[MetricId::kStepSeconds] >= 20 && rx.last.count(MetricId::kLoss); }));
  e.stop();
  EXPECT_EQ(rx.count[MetricId::kAllreduceSeconds], 0);
  EXPECT_EQ(rx.count[MetricId::kAllreduceBytes], 0);
  EXPECT_EQ(rx.count[MetricId::kAllreduceBusbwBytesPerSecond], 0);
  EXPECT_DOUBLE_EQ(rx.bytes_sum, 0);
}

TEST(Emitter, ACheckpointShorterThanATickIsStillReported) {
  Receiver rx;
  EmitterOptions o;
  o.collector = rx.address();
  o.hz = 1;  // ticks far apart: the 1 and the 0 below land between two ticks
  Emitter e(o);
  e.setGauge(MetricId::kCheckpointActive, 0);
  e.start();
  e.setGauge(MetricId::kCheckpointActive, 1);
  e.setGauge(MetricId::kCheckpointActive, 0);
  int ones = 0;
  ASSERT_TRUE(rx.receiveUntil([&] {
    if (rx.last.count(MetricId::kCheckpointActive) && rx.last[MetricId::kCheckpointActive] == 1)
      ++ones;
    return ones > 0;
  }));
  // And the tick after reports the real value again.
  rx.last.erase(MetricId::kCheckpointActive);
  ASSERT_TRUE(rx.receiveUntil([&] { return rx.last.count(MetricId::kCheckpointActive) > 0; }));
  EXPECT_EQ(rx.last[MetricId::kCheckpointActive], 0);
}

// A step running longer than the last one took lowers samples/s to samples / elapsed; a shorter
// one, or none running, leaves the last step's rate.
TEST(Emitter, SamplesPerSecondFollowsAStepThatRunsLongerThanTheLast) {
  Receiver rx;
  EmitterOptions o;
  o.collector = rx.address();
  Emitter e(o);  // not started: nothing is sent
  constexpr uint64_t kSecond = 1'000'000'000;
  EXPECT_EQ(e.samplesPerSecondNow(400, 5 * kSecond), 400);  // no step running
  e.stepStarted(10 * kSecond, 100);
  EXPECT_EQ(e.samplesPerSecondNow(400, 10 * kSecond + kSecond / 8), 400);  // 800/s so far
  EXPECT_EQ(e.samplesPerSecondNow(400, 10 * kSecond + kSecond / 4), 400);  // exactly the last
  EXPECT_DOUBLE_EQ(e.samplesPerSecondNow(400, 10 * kSecond + kSecond / 2), 200);
  EXPECT_DOUBLE_EQ(e.samplesPerSecondNow(400, 12 * kSecond), 50);
  e.stepEnded();
  EXPECT_EQ(e.samplesPerSecondNow(400, 12 * kSecond), 400);
}

// Through the wire: a step stuck for a second is reported at the ticks while it runs.
TEST(Emitter, AStuckStepShowsInTheSamplesPerSecondSent) {
  Receiver rx;
  EmitterOptions o;
  o.collector = rx.address();
  o.hz = 50;
  Emitter e(o);
  e.setGauge(MetricId::kSamplesPerSecond, 1000);  // the last step: 64 samples in 64 ms
  e.stepStarted(uint64_t(monotonicNowNs()), 64);
  e.start();
  ASSERT_TRUE(rx.receiveUntil([&] {
    return rx.last.count(MetricId::kSamplesPerSecond) &&
           rx.last[MetricId::kSamplesPerSecond] < 250;  // the step has run > 256 ms
  }));
  e.stepEnded();
  rx.last.erase(MetricId::kSamplesPerSecond);
  ASSERT_TRUE(rx.receiveUntil([&] {
    return rx.last.count(MetricId::kSamplesPerSecond) &&
           rx.last[MetricId::kSamplesPerSecond] == 1000;
  }));
  e.stop();
}

TEST(Emitter, ChangedThreadsTriggerANewHello) {
  Receiver rx;
  EmitterOptions o;
  o.collector = rx.address();
  o.hz = 50;
  Emitter e(o);
  e.setThreads({1});
  e.start();
  ASSERT_TRUE(rx.receiveUntil([&] { return rx.tids == std::vector<uint32_t>{1}; }));
  e.setThreads({1, 2});
  ASSERT_TRUE(rx.receiveUntil([&] { return rx.tids == std::vector<uint32_t>{1, 2}; }));
}

TEST(Emitter, FullRingDropsAndCountsWithoutBlocking) {
  Receiver rx;
  EmitterOptions o;
  o.collector = rx.address();
  o.ring_capacity = 8;
  Emitter e(o);  // not started: nobody drains the ring
  for (int i = 0; i < 20; ++i) e.pushStep({1, 1, 1, 1, 1});
  EXPECT_EQ(e.dropped(), 12u * 4);
  e.start();  // the drop count is reported as a counter increment
  ASSERT_TRUE(rx.receiveUntil([&] { return rx.last.count(MetricId::kTelemetryDropped) > 0; }));
  EXPECT_DOUBLE_EQ(rx.last[MetricId::kTelemetryDropped], 48);
}

TEST(Emitter, NoCollectorListeningDropsAndCounts) {
  // Nothing listens on port 1: sends fail (ECONNREFUSED) and are counted as drops; pushStep
  // never waits on the socket.
  EmitterOptions o;
  o.collector = "127.0.0.1:1";
  o.hz = 100;
  Emitter e(o);
  e.start();
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (e.dropped() == 0 && std::chrono::steady_clock::now() < deadline)
    e.pushStep({1, 1, 1, 1, 1});
  e.stop();
  EXPECT_GT(e.dropped(), 0u);
}

TEST(Emitter, RejectsBadOptions) {
  EmitterOptions o;
  o.hz = 500;
  EXPECT_THROW(Emitter{o}, std::runtime_error);
  o.hz = 10;
  o.collector = "nocolon";
  EXPECT_THROW(Emitter{o}, std::runtime_error);
}

}  // namespace
}  // namespace bpftrain::trainer::telemetry
