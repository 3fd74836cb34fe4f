// The run-statistics schedule (collector/loader/run_stats_sampler.h) against a fake switch: when
// the statistics go on and off, what each reading is scaled by, and a refused switch.
#include "collector/loader/run_stats_sampler.h"

#include <gtest/gtest.h>

#include <vector>

namespace bpftrain::collector::loader {
namespace {

constexpr int64_t kMs = 1'000'000;

struct FakeSwitch : RunStatsSwitch {
  std::vector<bool>* calls;
  bool refuse = false;
  explicit FakeSwitch(std::vector<bool>* c, bool r = false) : calls(c), refuse(r) {}
  Status set(bool on) override {
    calls->push_back(on);
    if (refuse && on) return Status::error("refused").withErrno(EPERM);
    return {};
  }
};

// One poll: beforeRead, afterRead; returns the reading.
RunStatsSampler::Reading poll(RunStatsSampler& s, int64_t now_ns) {
  const auto r = s.beforeRead(now_ns);
  s.afterRead(now_ns);
  return r;
}

TEST(RunStatsSampler, SampledIsOnForTheWindowAndScalesItToThePeriodItStandsFor) {
  std::vector<bool> calls;
  RunStatsSampler s({RunStatsMode::kSampled, 1000 * kMs, 30'000 * kMs},
                    std::make_unique<FakeSwitch>(&calls));
  EXPECT_TRUE(calls.empty()) << "nothing switches before the first poll";
  auto r = poll(s, 0);  // on, and the base
  EXPECT_TRUE(r.read);
  EXPECT_EQ(r.scale, 0);
  EXPECT_EQ(calls, std::vector<bool>({true}));
  EXPECT_FALSE(poll(s, 500 * kMs).read) << "inside the window: nothing to read";
  r = poll(s, 1000 * kMs);  // the window ends: it stands for the time since the first poll
  EXPECT_TRUE(r.read);
  EXPECT_DOUBLE_EQ(r.scale, 1.0);
  EXPECT_EQ(calls, std::vector<bool>({true, false}));
  EXPECT_FALSE(poll(s, 20'000 * kMs).read) << "off between windows";
  EXPECT_FALSE(poll(s, 29'000 * kMs).read) << "next on: 1 s + (30 s - 1 s)";
  r = poll(s, 30'000 * kMs);
  EXPECT_TRUE(r.read);
  EXPECT_EQ(r.scale, 0);
  r = poll(s, 31'200 * kMs);  // steps are not aligned: the window measured 1.2 s of 30.2 s
  EXPECT_TRUE(r.read);
  EXPECT_DOUBLE_EQ(r.scale, 30'200.0 / 1'200.0);
  EXPECT_EQ(calls, std::vector<bool>({true, false, true, false}));
  EXPECT_DOUBLE_EQ(s.measuredRatio(), 1.0 / 30);
}

TEST(RunStatsSampler, OnSwitchesOnceAtConstructionAndReadsEveryPollUnscaled) {
  std::vector<bool> calls;
  {
    RunStatsSampler s({RunStatsMode::kOn, 1000 * kMs, 30'000 * kMs},
                      std::make_unique<FakeSwitch>(&calls));
    EXPECT_EQ(calls, std::vector<bool>({true}));
    for (int64_t t : {0, 200, 400}) {
      const auto r = poll(s, t * kMs);
      EXPECT_TRUE(r.read);
      EXPECT_EQ(r.scale, 1);
    }
    EXPECT_EQ(s.measuredRatio(), 1);
  }
  EXPECT_EQ(calls, std::vector<bool>({true, false})) << "off again when the sampler goes";
}

TEST(RunStatsSampler, OffNeverSwitches) {
  std::vector<bool> calls;
  RunStatsSampler s({RunStatsMode::kOff, 1000 * kMs, 30'000 * kMs},
                    std::make_unique<FakeSwitch>(&calls));
  for (int64_t t : {0, 1000, 40'000}) EXPECT_FALSE(poll(s, t * kMs).read);
  EXPECT_TRUE(calls.empty());
  EXPECT_EQ(s.measuredRatio(), 0);
}

TEST(RunStatsSampler, ARefusedSwitchTurnsItOffForGoodAndTheRatioSaysSo) {
  std::vector<bool> calls;
  RunStatsSampler s({RunStatsMode::kSampled, 1000 * kMs, 30'000 * kMs},
                    std::make_unique<FakeSwitch>(&calls, /*refuse=*/true));
  EXPECT_FALSE(poll(s, 0).read);
  EXPECT_FALSE(poll(s, 60'000 * kMs).read);
  EXPECT_EQ(calls, std::vector<bool>({true})) << "asked once, not every period";
  EXPECT_EQ(s.measuredRatio(), 0);
  EXPECT_EQ(s.mode(), RunStatsMode::kOff);
}

TEST(RunStatsSampler, ANewSwitchTakesOverAnOpenWindow) {
  std::vector<bool> first, second;
  RunStatsSampler s({RunStatsMode::kSampled, 1000 * kMs, 30'000 * kMs},
                    std::make_unique<FakeSwitch>(&first));
  poll(s, 0);  // on through the first
  s.replaceSwitch(std::make_unique<FakeSwitch>(&second));
  EXPECT_EQ(first, std::vector<bool>({true, false}));
  EXPECT_EQ(second, std::vector<bool>({true}));
  EXPECT_TRUE(poll(s, 1000 * kMs).read);
  EXPECT_EQ(second, std::vector<bool>({true, false}));
}

TEST(RunStatsSampler, ANonsenseScheduleFallsBackToExactTotals) {
  std::vector<bool> calls;
  RunStatsSampler s({RunStatsMode::kSampled, 0, 30'000 * kMs},
                    std::make_unique<FakeSwitch>(&calls));
  EXPECT_EQ(s.mode(), RunStatsMode::kOn);
  EXPECT_EQ(calls, std::vector<bool>({true}));
}

}  // namespace
}  // namespace bpftrain::collector::loader
