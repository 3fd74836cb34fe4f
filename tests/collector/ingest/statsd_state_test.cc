#include "collector/ingest/statsd_state.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "collector/ingest/key_table.h"
#include "tests/collector/ingest/fake_store.h"

namespace bpftrain::collector::ingest {
namespace {

// The window the series store keeps: `steps` completed steps plus the one in progress.
TEST(DistinctWindowTest, CountsDistinctMembersOverTheSlidingWindow) {
  DistinctWindow w(3);  // steps 7..10 are the window ending at step 10
  EXPECT_EQ(w.count(0), 0u);
  ASSERT_TRUE(w.add(1, 0));
  ASSERT_TRUE(w.add(1, 0));  // same member, same step
  ASSERT_TRUE(w.add(2, 0));
  EXPECT_EQ(w.count(0), 2u);
  ASSERT_TRUE(w.add(1, 2));  // member 1 moves to step 2; still one member
  EXPECT_EQ(w.count(2), 2u);
  EXPECT_EQ(w.count(3), 2u);  // step 0 is still in the window ending at 3
  EXPECT_EQ(w.count(4), 1u);  // member 2 (last seen at 0) left; member 1 (2) stays
  EXPECT_EQ(w.count(6), 0u);
  ASSERT_TRUE(w.add(2, 6));  // an expired member comes back
  EXPECT_EQ(w.count(6), 1u);
}

TEST(DistinctWindowTest, ManyMembersExactAcrossRebuildsAndExpiry) {
  DistinctWindow w(10);
  for (uint64_t i = 0; i < 5000; ++i) ASSERT_TRUE(w.add(hashKey(std::to_string(i)), 0));
  for (uint64_t i = 0; i < 5000; i += 2) ASSERT_TRUE(w.add(hashKey(std::to_string(i)), 5));
  EXPECT_EQ(w.count(5), 5000u);
  EXPECT_EQ(w.count(11), 2500u);  // the odd ones were last seen at step 0
  for (uint64_t i = 5000; i < 8000; ++i) ASSERT_TRUE(w.add(hashKey(std::to_string(i)), 11));
  EXPECT_EQ(w.count(11), 5500u);
  EXPECT_EQ(w.count(16), 3000u);
}

TEST(DistinctWindowTest, FullSetRefusesNewMembersOnly) {
  DistinctWindow w(1);
  for (uint64_t i = 0; i < kMaxSetMembers; ++i) ASSERT_TRUE(w.add(i * 0x9E3779B97F4A7C15ull, 0));
  EXPECT_FALSE(w.add(12345, 0));
  EXPECT_TRUE(w.add(0, 0));  // a known member is still counted
  EXPECT_EQ(w.count(0), kMaxSetMembers);
  EXPECT_TRUE(w.add(12345, 2));  // the window moved on: room again
  EXPECT_EQ(w.count(2), 1u);
}

// Two threads applying deltas to one gauge end at the exact sum, and the last recorded value is
// the final one (strictly increasing timestamps per gauge).
TEST(StatsdStateTest, GaugeDeltasFromTwoThreadsAgree) {
  testing::FakeStore store;
  StatsdState state(store.config());
  window::SeriesId id = store.lookup("g", {}, window::SeriesKind::kGauge);
  auto& cell = state.gauge(id);
  auto work = [&](int writer) {
    for (int i = 0; i < 10000; ++i) StatsdState::applyGauge(cell, store, writer, id, 1, true, 1000);
  };
  std::thread a(work, 0), b(work, 1);
  a.join();
  b.join();
  EXPECT_EQ(store.get("g{}").values.back(), 20000);
  EXPECT_EQ(cell.value, 20000);
}

TEST(StatsdStateTest, RefreshRecordsTheCountAsMembersExpire) {
  testing::FakeStore store;  // 5 s window, 500 ms steps
  StatsdState state(store.config());
  window::SeriesId id = store.lookup("users", {}, window::SeriesKind::kGauge);
  auto& cell = state.set(id);
  EXPECT_EQ(&state.set(id), &cell);
  const int64_t s = 500'000'000;
  StatsdState::addMember(cell, store, 0, 1, 0);
  StatsdState::addMember(cell, store, 0, 2, 0);
  StatsdState::addMember(cell, store, 0, 2, s);
  state.refreshSets(store, 0, 10 * s);  // step 10: step 0 still in the window
  state.refreshSets(store, 0, 11 * s);  // member 1 gone
  state.refreshSets(store, 0, 12 * s);  // member 2 gone
  state.refreshSets(store, 0, 13 * s);  // 0 already recorded: not written again (it may expire)
  EXPECT_EQ(store.get("users{}").values, (std::vector<double>{1, 2, 2, 2, 1, 0}));
  StatsdState::addMember(cell, store, 0, 3, 14 * s);
  EXPECT_EQ(store.get("users{}").values.back(), 1);
  EXPECT_EQ(state.sets(), 1u);
}

}  // namespace
}  // namespace bpftrain::collector::ingest
