// The NCCL controller's service on a real series store fed as the ingest feeds it: decisions
// are one signed kind-6 frame per rank, to each rank's hello address, starting ahead of every
// rank's progress by the lead; a switch only some ranks made is put right for all of them; a
// communicator whose ranks do not all report here is left alone.
#include "collector/controller/nccl_controller.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>

#include <set>

#include "common/control_frame.h"
#include "common/wire_format.h"

namespace bpftrain::collector::controller {
namespace {

constexpr int64_t kStep = 500'000'000;
const std::string kSecret = "nccl-controller-test-secret-0123";

SocketAddress loopback(uint16_t port) {
  SocketAddress a;
  auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
  in->sin_family = AF_INET;
  in->sin_port = htons(port);
  in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.length = sizeof(sockaddr_in);
  return a;
}

struct Sent {
  uint16_t port;
  std::vector<uint8_t> bytes;
};

class NcclControllerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    window::WindowConfig wc;
    wc.window = std::chrono::seconds(10);
    wc.step = std::chrono::milliseconds(500);
    wc.writers = 2;
    store_ = window::SeriesStore::create(wc);
    senders_ = {{"job1", 0, 2, loopback(40000)}, {"job1", 1, 2, loopback(40001)}};
    make({});
  }
  void make(NcclControllerConfig c) {
    c.secret = kSecret;
    c.writer = 1;
    std::string error;
    controller_ = NcclController::create(
        c, store_.get(),
        [this](const SocketAddress& to, std::span<const uint8_t> d, std::string&) {
          sent_.push_back({to.port(), std::vector<uint8_t>(d.begin(), d.end())});
          return true;
        },
        error);
    ASSERT_NE(controller_, nullptr) << error;
  }
  void record(const metrics::MetricDef& m, std::vector<window::Label> labels, double v) {
    window::SeriesId id = window::lookupMetric(*store_, m, labels);
    ASSERT_NE(id, window::kRejectedSeries);
    store_->record(0, id, v, now_);
  }
  // One flush of rank `r`: its progress and decision epoch, and `n` allreduces of 1 MiB with
  // the pair `arm` ran at `seconds` each.
  void report(int r, double calls, double epoch, const char* algo, const char* proto, int n,
              double seconds) {
    const std::string rank = std::to_string(r);
    record(metrics::kNcclTunerCalls, {{"job", "job1"}, {"rank", rank}, {"comm", kComm}}, calls);
    record(metrics::kNcclDecisionEpoch, {{"job", "job1"}, {"rank", rank}, {"comm", kComm}}, epoch);
    std::vector<window::Label> l = {{"job", "job1"},     {"rank", rank},
                                    {"comm", kComm},     {"collective", "allreduce"},
                                    {"algorithm", algo}, {"protocol", proto}};
    record(metrics::kNcclCollectives, l, n);
    record(metrics::kNcclCollectiveBytes, l, n * double(1 << 20));
    for (int i = 0; i < n; ++i) record(metrics::kNcclCollectiveSeconds, l, seconds);
  }
  void step() {
    controller_->onStep(*store_, senders_, now_);
    now_ += kStep;
  }
  wire::NcclControl decode(const Sent& s) {
    std::span<const uint8_t> d(s.bytes);
    wire::FrameView f;
    wire::NcclControl c;
    EXPECT_EQ(wire::nextFrame(d, f), wire::DecodeError::kNone);
    EXPECT_EQ(f.header.kind, wire::FrameKind::kNcclControl);
    EXPECT_EQ(wire::decodeNcclControl(f, c), wire::DecodeError::kNone);
    EXPECT_TRUE(wire::verifyNcclControl(c, kSecret));
    EXPECT_FALSE(wire::verifyNcclControl(c, "another secret"));
    return c;
  }

  static constexpr const char* kComm = "0000000000005eed";
  std::unique_ptr<window::SeriesStore> store_;
  std::vector<NcclSender> senders_;
  std::unique_ptr<NcclController> controller_;
  std::vector<Sent> sent_;
  int64_t now_ = 1'000'000'000;
};

TEST_F(NcclControllerTest, ADecisionIsOneSignedFramePerRankStartingAheadOfEveryRank) {
  // Both ranks run NCCL's choice, ring/ll128, at 1 ms per allreduce, 1000 calls per second;
  // rank 1 is 300 calls ahead.
  double calls = 1000;
  while (sent_.empty() && calls < 20000) {
    report(0, calls, 0, "ring", "ll128", 20, 1e-3);
    report(1, calls + 300, 0, "ring", "ll128", 20, 1e-3);
    step();
    calls += 500;
  }
  ASSERT_EQ(sent_.size(), 2u);                // one per rank
  EXPECT_EQ(sent_[0].bytes, sent_[1].bytes);  // the same decision, the same signature
  std::set<uint16_t> ports = {sent_[0].port, sent_[1].port};
  EXPECT_EQ(ports, (std::set<uint16_t>{40000, 40001}));
  wire::NcclControl c = decode(sent_[0]);
  EXPECT_EQ(c.job, "job1");
  EXPECT_EQ(c.comm_id, 0x5eedu);
  EXPECT_EQ(c.epoch, 1u);
  EXPECT_EQ(c.collective, 4);  // allreduce
  // The only shown pair is tried against NCCL's own choice: ring/ll128 forced.
  EXPECT_EQ(c.algorithm, 1);
  EXPECT_EQ(c.protocol, 1);
  // Rank 1 reported calls - 200 (the loop advanced after the last report): 1000 calls/s x 2 s
  // of lead ahead of it.
  const double ahead = calls - 500 + 300;
  EXPECT_GE(double(c.start_call), ahead + 1900);
  EXPECT_LE(double(c.start_call), ahead + 2100);
  EXPECT_EQ(controller_->stats().decisions, 1u);
  EXPECT_EQ(controller_->stats().sends, 2u);
}

TEST_F(NcclControllerTest, ASwitchOnlySomeRanksMadeIsDecidedAgainForAll) {
  double calls = 1000;
  while (sent_.empty() && calls < 20000) {
    report(0, calls, 0, "ring", "ll128", 20, 1e-3);
    report(1, calls, 0, "ring", "ll128", 20, 1e-3);
    step();
    calls += 500;
  }
  ASSERT_EQ(sent_.size(), 2u);
  const wire::NcclControl first = decode(sent_[0]);
  sent_.clear();
  // Both ranks pass the start call; rank 1 never got the decision (its epoch stays 0).
  const double past = double(first.start_call) + 100;
  report(0, past, double(first.epoch), "ring", "ll128", 20, 1e-3);
  report(1, past, 0, "ring", "ll128", 20, 1e-3);
  step();
  EXPECT_EQ(controller_->stats().abandoned, 1u);
  ASSERT_EQ(sent_.size(), 2u);
  const wire::NcclControl again = decode(sent_[0]);
  EXPECT_GT(again.epoch, first.epoch);
  EXPECT_EQ(again.algorithm, wire::kNcclAny);  // back to what it was: NCCL's own choice
  EXPECT_GT(double(again.start_call), past);
}

TEST_F(NcclControllerTest, ACommunicatorWithARankReportingElsewhereIsLeftAlone) {
  for (double calls = 1000; calls < 20000; calls += 500) {
    report(0, calls, 0, "ring", "ll128", 20, 1e-3);  // rank 1 of 2 reports to another collector
    step();
  }
  EXPECT_TRUE(sent_.empty());
  EXPECT_EQ(controller_->stats().comms, 0u);
}

TEST(NcclControllerCreate, ActModeNeedsASecret) {
  std::string error;
  auto c = NcclController::create(
      NcclControllerConfig{}, nullptr,
      [](const SocketAddress&, std::span<const uint8_t>, std::string&) { return true; }, error);
  EXPECT_EQ(c, nullptr);
  EXPECT_NE(error.find("--secret"), std::string::npos) << error;
  NcclControllerConfig advise;
  advise.mode = ControlMode::kAdvise;
  EXPECT_NE(NcclController::create(advise, nullptr, nullptr, error), nullptr) << error;
}

}  // namespace
}  // namespace bpftrain::collector::controller
