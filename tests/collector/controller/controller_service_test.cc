#include "collector/controller/controller_service.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "collector/controller/rules_policy.h"
#include "common/clock.h"
#include "common/control_frame.h"
#include "tests/collector/controller/synthetic.h"
#include "tests/support/loopback.h"

namespace bpftrain::collector::controller {
namespace {

using namespace testing;

constexpr int64_t kStepNs = 500'000'000;
const std::string kSecret = "0123456789abcdef0123456789abcdef";

// The trainer's side of the control port, as a test double: a UDP socket on port 0 that checks
// each frame with the wire decoder and common/control_frame.h, the trainer's own check (whose
// MAC tests/common/control_frame_test.cc holds to a value computed outside this code).
class FakeTrainer {
 public:
  FakeTrainer() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(bpftrain::testing::bindLoopbackPort0(fd_, &port_), 0);
  }
  ~FakeTrainer() { close(fd_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  struct Received {
    wire::Control control;
    std::string job;
    bool mac_ok = false;
  };
  // Waits up to `timeout` for one frame (a sendto on loopback has queued it before returning,
  // so tests that expect nothing pass a zero timeout).
  std::optional<Received> receive(std::chrono::milliseconds timeout) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, int(timeout.count())) <= 0) return std::nullopt;
    ssize_t n = recv(fd_, buf_.data(), buf_.size(), 0);
    if (n <= 0) return std::nullopt;
    std::span<const uint8_t> dgram(buf_.data(), size_t(n));
    wire::FrameView frame;
    if (wire::nextFrame(dgram, frame) != wire::DecodeError::kNone) return std::nullopt;
    EXPECT_EQ(frame.header.kind, wire::FrameKind::kControl);
    Received r;
    if (wire::decodeControl(frame, r.control) != wire::DecodeError::kNone) return std::nullopt;
    r.job = std::string(r.control.job);
    r.mac_ok = wire::verifyControl(r.control, kSecret);
    return r;
  }

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
  std::array<uint8_t, 65536> buf_{};
};

JobState congestedJob() {
  JobState j;
  j.queued_bytes_p99 = 20e6;
  return j;
}

// The rules policy as the collector makes it, except that a job congested from its first step
// (no calm reference yet) counts after escalate_steps like any other: these tests are about the
// service, and start congested.
std::unique_ptr<Policy> quickRules() {
  RulesConfig c;
  c.no_reference_steps = c.escalate_steps;
  return std::make_unique<RulesPolicy>(c);
}

std::vector<nlohmann::json> readLog(const std::string& path) {
  std::vector<nlohmann::json> v;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) v.push_back(nlohmann::json::parse(line));
  return v;
}

class ReactOnly;

class ControllerServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    log_ = (std::filesystem::temp_directory_path() /
            ("controller_test_" + std::to_string(getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".jsonl"))
               .string();
    std::filesystem::remove(log_);
  }
  void TearDown() override { std::filesystem::remove(log_); }
  ControllerConfig config() {
    ControllerConfig c;
    c.policy = "rules";
    c.trainer_address = trainer_.address();
    c.secret = kSecret;
    c.job = "j";
    c.decisions_log = log_;
    return c;
  }
  std::unique_ptr<ControllerService> reactOnlyAfterAStep(ReactOnly*& policy);
  FakeTrainer trainer_;
  FakeStore store_;
  std::string log_;
};

TEST_F(ControllerServiceTest, SendsASignedDecisionAndRetriesUntilEveryRankAppliedIt) {
  std::string error;
  auto svc = ControllerService::create(config(), quickRules(), &store_, error);
  ASSERT_TRUE(svc) << error;
  JobState j = congestedJob();
  store_.set(snapshotsOf(j));
  svc->onStep(store_, 0);
  EXPECT_FALSE(trainer_.receive(std::chrono::milliseconds(0)));  // one congested step: wait
  svc->onStep(store_, kStepNs);
  auto r = trainer_.receive(std::chrono::seconds(2));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->mac_ok);
  EXPECT_EQ(r->job, "j");
  EXPECT_EQ(r->control.epoch, 1u);
  EXPECT_EQ(r->control.topology, uint8_t(Topology::kHierarchical));
  EXPECT_EQ(r->control.pinning, uint8_t(PinMode::kNone));
  int64_t skew = int64_t(r->control.timestamp_ns) - int64_t(realtimeNowNs());
  EXPECT_LT(std::abs(skew), int64_t(5e9));
  EXPECT_EQ(svc->pendingEpoch(), std::optional<uint64_t>(1));

  // The trainer has not applied it yet: the same decision is re-sent, freshly stamped.
  svc->onStep(store_, 2 * kStepNs);
  auto again = trainer_.receive(std::chrono::seconds(2));
  ASSERT_TRUE(again);
  EXPECT_TRUE(again->mac_ok);
  EXPECT_EQ(again->control.epoch, 1u);
  EXPECT_EQ(again->control.topology, uint8_t(Topology::kHierarchical));

  // One rank applied, the other not yet: still pending.
  std::vector<SeriesSnapshot> half = snapshotsOf(j);
  half.push_back(gauge("bpftrain_config_epoch", jr("j", 0), 1));
  for (auto& s : half)
    if (s.name == "bpftrain_config_epoch" && s.labels[1].second == "0") s.last = 1;
  store_.set(half);
  svc->onStep(store_, 3 * kStepNs);
  ASSERT_TRUE(trainer_.receive(std::chrono::seconds(2)));
  EXPECT_TRUE(svc->pendingEpoch());

  // Every rank reports epoch 1 on the new topology: applied, nothing more is sent.
  j.epoch = 1;
  j.topology = int(Topology::kHierarchical);
  store_.set(snapshotsOf(j));
  svc->onStep(store_, 4 * kStepNs);
  EXPECT_FALSE(svc->pendingEpoch());
  EXPECT_FALSE(trainer_.receive(std::chrono::milliseconds(0)));
  EXPECT_EQ(svc->stats().decisions, 1u);
  EXPECT_EQ(svc->stats().applied, 1u);
  EXPECT_EQ(svc->stats().sends, 3u);

  EXPECT_EQ(store_.ownTotal(
                "bpftrain_controller_decisions",
                {{"from", "ring/none"}, {"to", "hierarchical/none"}, {"reason", "congestion"}}),
            1);
  EXPECT_EQ(store_.ownTotal("bpftrain_controller_sends", {{"result", "ok"}}), 3);
  EXPECT_EQ(store_.ownTotal("bpftrain_controller_apply_seconds"), 1);  // one latency sample

  auto lines = readLog(log_);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["event"], "decision");
  EXPECT_EQ(lines[0]["from"], "ring/none");
  EXPECT_EQ(lines[0]["to"], "hierarchical/none");
  EXPECT_EQ(lines[0]["reason"], "congestion");
  EXPECT_EQ(lines[0]["epoch"], 1);
  EXPECT_TRUE(lines[0]["features"]["queued_bytes_p99"].get<double>() > 16e6);
  EXPECT_TRUE(lines[0].contains("decide_latency_us"));
  EXPECT_EQ(lines[1]["event"], "applied");
  EXPECT_DOUBLE_EQ(lines[1]["apply_latency_s"].get<double>(), 1.5);
}

TEST_F(ControllerServiceTest, NeverDecidesOrSendsWhileACheckpointIsBeingWritten) {
  std::string error;
  auto svc = ControllerService::create(config(), quickRules(), &store_, error);
  ASSERT_TRUE(svc) << error;
  JobState j = congestedJob();
  j.checkpoint = true;
  store_.set(snapshotsOf(j));
  for (int i = 0; i < 10; ++i) svc->onStep(store_, i * kStepNs);
  EXPECT_FALSE(trainer_.receive(std::chrono::milliseconds(0)));
  EXPECT_EQ(svc->stats().decisions, 0u);
  EXPECT_EQ(svc->stats().deferred_checkpoint, 10u);
  EXPECT_EQ(store_.ownTotal("bpftrain_controller_deferred", {{"reason", "checkpoint"}}), 10);

  j.checkpoint = false;
  store_.set(snapshotsOf(j));
  svc->onStep(store_, 10 * kStepNs);
  svc->onStep(store_, 11 * kStepNs);
  auto r = trainer_.receive(std::chrono::seconds(2));
  ASSERT_TRUE(r);
  EXPECT_EQ(r->control.topology, uint8_t(Topology::kHierarchical));

  // A checkpoint starting while the decision is pending holds the re-sends too.
  j.checkpoint = true;
  store_.set(snapshotsOf(j));
  svc->onStep(store_, 12 * kStepNs);
  EXPECT_FALSE(trainer_.receive(std::chrono::milliseconds(0)));
  EXPECT_TRUE(svc->pendingEpoch());
}

TEST_F(ControllerServiceTest, AdviseModeRecommendsLogsAndCountsButSendsNothing) {
  ControllerConfig c = config();
  c.mode = ControlMode::kAdvise;
  c.secret.clear();
  std::string error;
  auto svc = ControllerService::create(c, quickRules(), &store_, error);
  ASSERT_TRUE(svc) << error;
  store_.set(snapshotsOf(congestedJob()));
  for (int i = 0; i < 40; ++i) svc->onStep(store_, i * kStepNs);
  EXPECT_FALSE(trainer_.receive(std::chrono::milliseconds(0)));
  EXPECT_EQ(svc->stats().decisions, 1u);  // repeated advice is logged once
  EXPECT_EQ(svc->stats().sends, 0u);
  EXPECT_EQ(store_.ownTotal("bpftrain_controller_decisions", {{"reason", "congestion"}}), 1);
  auto lines = readLog(log_);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["mode"], "advise");
  EXPECT_EQ(lines[0]["to"], "hierarchical/none");
}

TEST_F(ControllerServiceTest, AbandonsADecisionTheTrainerNeverApplies) {
  ControllerConfig c = config();
  c.max_retries = 3;
  std::string error;
  auto svc = ControllerService::create(c, quickRules(), &store_, error);
  ASSERT_TRUE(svc) << error;
  store_.set(snapshotsOf(congestedJob()));
  for (int i = 0; i < 2; ++i) svc->onStep(store_, i * kStepNs);
  for (int i = 2; i < 6; ++i) svc->onStep(store_, i * kStepNs);
  EXPECT_EQ(svc->stats().sends, 4u);  // the first send and 3 retries
  EXPECT_EQ(svc->stats().abandoned, 1u);
  EXPECT_FALSE(svc->pendingEpoch());
  auto lines = readLog(log_);
  ASSERT_GE(lines.size(), 2u);
  EXPECT_EQ(lines[1]["event"], "abandoned");
}

// Signing and checking alone: tests/common/control_frame_test.cc.

// A policy that moves only between steps, when told to: what onTick() does with react().
class ReactOnly final : public Policy {
 public:
  std::string_view name() const override { return "react-only"; }
  Decision decide(const Features&, const Arm& current, int64_t) override {
    ++decides;
    Decision d;
    d.to = current;
    return d;
  }
  Decision react(const Features&, const Arm& current, int64_t) override {
    ++reacts;
    Decision d;
    d.to = current;
    if (go) {
      d.change = true;
      d.to.topology = Topology::kHierarchical;
      d.reason = "congestion";
      d.detail = "between steps";
      d.link = link;
    }
    return d;
  }
  bool go = false;
  int link = -1;
  int decides = 0, reacts = 0;
};

// The service with a ReactOnly policy (`policy` points at it) after one step found the job.
std::unique_ptr<ControllerService> ControllerServiceTest::reactOnlyAfterAStep(ReactOnly*& policy) {
  std::string error;
  auto owned = std::make_unique<ReactOnly>();
  policy = owned.get();
  auto svc = ControllerService::create(config(), std::move(owned), &store_, error);
  EXPECT_TRUE(svc) << error;
  if (!svc) return svc;
  store_.set(snapshotsOf(JobState{}));
  svc->onStep(store_, 0);
  return svc;
}

// Between steps the service asks react() on fresh features and sends what it decides at once;
// nothing is asked before the first step found the job, or while a decision is in flight.
TEST_F(ControllerServiceTest, ATickSendsADecisionOfReactAtOnceAndWaitsWhileOneIsPending) {
  ReactOnly* policy = nullptr;
  auto svc = reactOnlyAfterAStep(policy);
  ASSERT_TRUE(svc);
  svc->onTick(store_, 100'000'000);
  EXPECT_EQ(policy->reacts, 1);
  EXPECT_FALSE(trainer_.receive(std::chrono::milliseconds(0)));
  policy->go = true;
  svc->onTick(store_, 200'000'000);
  auto r = trainer_.receive(std::chrono::seconds(2));
  ASSERT_TRUE(r);
  EXPECT_TRUE(r->mac_ok);
  EXPECT_EQ(r->control.epoch, 1u);
  EXPECT_EQ(r->control.topology, uint8_t(Topology::kHierarchical));
  EXPECT_EQ(svc->pendingEpoch(), std::optional<uint64_t>(1));
  EXPECT_EQ(svc->stats().decisions, 1u);
  // In flight: no second look between steps; the step re-sends it as before.
  svc->onTick(store_, 300'000'000);
  EXPECT_EQ(policy->reacts, 2);
  EXPECT_FALSE(trainer_.receive(std::chrono::milliseconds(0)));
  svc->onStep(store_, kStepNs);
  auto again = trainer_.receive(std::chrono::seconds(2));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->control.epoch, 1u);
  auto log = readLog(log_);
  ASSERT_FALSE(log.empty());
  EXPECT_EQ(log.back()["event"], "decision");
  EXPECT_EQ(log.back()["detail"], "between steps");
}

// A move on a link's congestion names that link in the diagnosis at once, without the two
// steps' hold, and the decision's log line carries it.
TEST_F(ControllerServiceTest, AMoveOnALinkNamesItInTheDiagnosisBeforeTheDecision) {
  ReactOnly* policy = nullptr;
  auto svc = reactOnlyAfterAStep(policy);
  ASSERT_TRUE(svc);
  JobState j;
  j.same_host = {12e-3, 40e-3, 7e6};
  j.other_host = {1.3e-3, 6.5e-3, 6e6};
  store_.set(snapshotsOf(j));
  policy->go = true;
  policy->link = int(Link::kSameHost);
  svc->onTick(store_, 100'000'000);
  ASSERT_TRUE(trainer_.receive(std::chrono::seconds(2)));
  auto log = readLog(log_);
  ASSERT_GE(log.size(), 2u);
  const nlohmann::json& diagnosis = log[log.size() - 2];
  EXPECT_EQ(diagnosis["event"], "diagnosis");
  EXPECT_EQ(diagnosis["cause"], "congested_link");
  EXPECT_EQ(diagnosis["link"], "same_host");
  EXPECT_EQ(log.back()["event"], "decision");
  EXPECT_EQ(log.back()["diagnosis"]["link"], "same_host");
}

// A step slower than the looks' window (netlab's ring on throttled lo: 1.3 s against 500 ms)
// leaves it without a step sample, which is when a look between steps matters: it still looks
// while the ranks' samples/s gauges report the step in flight, and not once the job is silent.
TEST_F(ControllerServiceTest, ALookBetweenStepsHappensInsideAStepLongerThanItsWindow) {
  ReactOnly* policy = nullptr;
  auto svc = reactOnlyAfterAStep(policy);
  ASSERT_TRUE(svc);
  std::vector<window::SeriesSnapshot> in_step = snapshotsOf(JobState{});
  std::erase_if(in_step, [](const window::SeriesSnapshot& s) {
    return s.name == "bpftrain_step_seconds" || s.name == "bpftrain_allreduce_seconds";
  });
  store_.set(in_step);
  svc->onTick(store_, 100'000'000);
  EXPECT_EQ(policy->reacts, 1);
  std::erase_if(in_step, [](const window::SeriesSnapshot& s) {
    return s.name == "bpftrain_samples_per_second";
  });
  store_.set(in_step);
  svc->onTick(store_, 200'000'000);
  EXPECT_EQ(policy->reacts, 1) << "nothing from the job in the window: no look";
}

TEST_F(ControllerServiceTest, FeaturesLogWritesALinePerPeriodAndEveryLookWhenThePeriodIsATick) {
  const std::string features = log_ + ".features";
  std::string error;
  JobState j;
  store_.set(snapshotsOf(j));
  {
    // The default, one line every 2 s: steps at 0, 0.5, ..., 2.5 s and a look between two.
    ControllerConfig c = config();
    c.features_log = features;
    auto svc = ControllerService::create(c, quickRules(), &store_, error);
    ASSERT_TRUE(svc) << error;
    for (int64_t k = 0; k <= 5; ++k) {
      svc->onStep(store_, k * kStepNs);
      svc->onTick(store_, k * kStepNs + 100'000'000);
    }
  }
  auto lines = readLog(features);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["look"], "step");
  EXPECT_EQ(lines[1]["look"], "step");
  EXPECT_EQ(lines[0]["job"], "j");
  EXPECT_TRUE(lines[0]["features"].contains("samples_per_s"));
  std::filesystem::remove(features);
  {
    // At the looks' period: the step and every look between steps, each with what it read.
    ControllerConfig c = config();
    c.features_log = features;
    c.features_log_every = std::chrono::milliseconds(100);
    auto svc = ControllerService::create(c, quickRules(), &store_, error);
    ASSERT_TRUE(svc) << error;
    svc->onStep(store_, 0);
    svc->onTick(store_, 100'000'000);
    svc->onTick(store_, 200'000'000);
  }
  lines = readLog(features);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0]["look"], "step");
  EXPECT_EQ(lines[1]["look"], "react");
  EXPECT_EQ(lines[2]["look"], "react");
  std::filesystem::remove(features);
}

TEST(ControllerServiceConfig, ErrorsNameTheFix) {
  std::string error;
  ControllerConfig c;
  c.secret = kSecret;
  c.policy = "magic";
  EXPECT_FALSE(ControllerService::create(c, nullptr, error));
  EXPECT_NE(error.find("--policy rules or bandit"), std::string::npos) << error;
  c.policy = "bandit";
  c.trainer_address = "localhost";
  EXPECT_FALSE(ControllerService::create(c, nullptr, error));
  EXPECT_NE(error.find("--trainer: expected HOST:PORT, [IPV6]:PORT or NAME:PORT"),
            std::string::npos)
      << error;
  c.trainer_address = "127.0.0.1:9472";
  c.secret.clear();
  EXPECT_FALSE(ControllerService::create(c, nullptr, error));
  EXPECT_NE(error.find("--secret"), std::string::npos) << error;
  c.secret = kSecret;
  c.decisions_log = "/nonexistent-dir/x.jsonl";
  EXPECT_FALSE(ControllerService::create(c, nullptr, error));
  EXPECT_NE(error.find("writable"), std::string::npos) << error;
  EXPECT_EQ(parseControlMode("advise"), ControlMode::kAdvise);
  EXPECT_FALSE(parseControlMode("maybe"));
}

}  // namespace
}  // namespace bpftrain::collector::controller
