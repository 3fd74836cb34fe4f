#include "collector/window/sliding_window.h"

#include <gtest/gtest.h>

#include <cmath>

namespace bpftrain::collector::window {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;

WindowSpec spec(bool sketch = false) {
  WindowSpec s;
  s.step_ns = 100 * kMs;
  s.steps = 10;  // a 1 s window
  s.with_sketch = sketch;
  return s;
}

StepAggregate collect(const SlidingWindow& w, int64_t now, Sketch* sketch = nullptr) {
  StepAggregate agg;
  w.collect(now, agg, sketch);
  return agg;
}

TEST(SlidingWindow, OldStepsLeaveTheWindowAsTimeAdvances) {
  SlidingWindow w(spec());
  const int64_t t0 = 50 * kSec;
  // One sample in each of five consecutive steps: values 1..5.
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(w.add(t0 + i * 100 * kMs, i + 1));
  StepAggregate a = collect(w, t0 + 450 * kMs);
  EXPECT_EQ(a.count, 5u);
  EXPECT_EQ(a.sum, 15);
  EXPECT_EQ(a.min, 1);
  EXPECT_EQ(a.max, 5);
  EXPECT_EQ(a.last, 5);

  // The window is the 10 completed steps before the current one plus the current one; at
  // t0 + 1.05 s the step of t0 (value 1) is 10 steps old and still in, at t0 + 1.15 s it is out.
  EXPECT_EQ(collect(w, t0 + 1050 * kMs).count, 5u);
  a = collect(w, t0 + 1150 * kMs);
  EXPECT_EQ(a.count, 4u);
  EXPECT_EQ(a.min, 2);
  a = collect(w, t0 + 1350 * kMs);
  EXPECT_EQ(a.count, 2u);
  EXPECT_EQ(a.sum, 9);
  EXPECT_EQ(collect(w, t0 + 10 * kSec).count, 0u);

  // Step 15 reuses step 4's slot (11 slots); the old content is gone.
  ASSERT_TRUE(w.add(t0 + 1500 * kMs, 100));
  a = collect(w, t0 + 1500 * kMs);
  EXPECT_EQ(a.count, 1u);
  EXPECT_EQ(a.min, 100);
}

TEST(SlidingWindow, SamplesOlderThanTheRingAreRefused) {
  SlidingWindow w(spec());
  const int64_t t0 = 10 * kSec;
  ASSERT_TRUE(w.add(t0 + 2 * kSec, 1));
  // Same slot as t0 + 2 s, eleven steps earlier: older than the ring.
  EXPECT_FALSE(w.add(t0 + 2 * kSec - 1100 * kMs, 7));
  EXPECT_EQ(collect(w, t0 + 2 * kSec).count, 1u);
  // A slightly late sample that is still inside the ring is kept.
  EXPECT_TRUE(w.add(t0 + 2 * kSec - 300 * kMs, 2));
  EXPECT_EQ(collect(w, t0 + 2 * kSec).count, 2u);
}

TEST(SlidingWindow, RateOverTheWindow) {
  SlidingWindow w(spec());
  const int64_t t0 = 100 * kSec;
  // 100 samples per second for 3 s.
  int64_t t = t0;
  for (; t < t0 + 3 * kSec; t += 10 * kMs) w.add(t, 1);
  const int64_t now = t0 + 3 * kSec;
  StepAggregate a = collect(w, now);
  double rate = w.rate(double(a.count), now, w.stepOf(t0));
  EXPECT_NEAR(rate, 100, 1);
  // Young series: the rate covers only the time since its first step.
  SlidingWindow young(spec());
  for (int64_t u = t0; u < t0 + 300 * kMs; u += 10 * kMs) young.add(u, 2.5);
  a = collect(young, t0 + 300 * kMs);
  EXPECT_NEAR(young.rate(a.sum, t0 + 300 * kMs, young.stepOf(t0)), 250, 1e-6);
  // Idle series: the window empties and the rate drops to zero.
  a = collect(w, now + 5 * kSec);
  EXPECT_EQ(w.rate(double(a.count), now + 5 * kSec, w.stepOf(t0)), 0);
}

TEST(SlidingWindow, StepsBeforeCoverTheWindowWithTheStepInProgress) {
  constexpr int64_t ms = 1'000'000, step = 500 * ms, t = 1000 * step;  // t: a step boundary
  // Multiples of the step take that many whole steps, wherever the step in progress is.
  for (int64_t age : {int64_t(0), 1 * ms, 250 * ms, 499 * ms}) {
    EXPECT_EQ(SlidingWindow::stepsBefore(t + age, 1000 * ms, step), 2) << age;
    EXPECT_EQ(SlidingWindow::stepsBefore(t + age, 500 * ms, step), 1) << age;
    EXPECT_EQ(SlidingWindow::stepsBefore(t + age, 5000 * ms, step), 10) << age;
  }
  // A shorter window: the step in progress alone once it has run that long.
  EXPECT_EQ(SlidingWindow::stepsBefore(t + 100 * ms, 250 * ms, step), 1);
  EXPECT_EQ(SlidingWindow::stepsBefore(t + 250 * ms, 250 * ms, step), 0);
  EXPECT_EQ(SlidingWindow::stepsBefore(t + 400 * ms, 250 * ms, step), 0);
  // 750 ms: two steps before while the step in progress is younger than 250 ms, then one.
  EXPECT_EQ(SlidingWindow::stepsBefore(t + 100 * ms, 750 * ms, step), 2);
  EXPECT_EQ(SlidingWindow::stepsBefore(t + 300 * ms, 750 * ms, step), 1);
}

TEST(SlidingWindow, SketchFollowsTheWindow) {
  SlidingWindow w(spec(true));
  const int64_t t0 = 20 * kSec;
  for (int i = 0; i < 100; ++i) w.add(t0, 1000);  // an early burst of slow samples
  for (int i = 0; i < 100; ++i) w.add(t0 + 500 * kMs, 10);
  Sketch s;
  StepAggregate a = collect(w, t0 + 600 * kMs, &s);
  EXPECT_EQ(a.count, 200u);
  EXPECT_NEAR(s.quantile(0.99), 1000, 10);
  s.clear();
  a = collect(w, t0 + 1200 * kMs, &s);  // the burst's step has left the window
  EXPECT_EQ(a.count, 100u);
  EXPECT_NEAR(s.quantile(0.99), 10, 0.1);
}

TEST(SlidingWindow, CollectStepAndMergeAt) {
  SlidingWindow child(spec(true)), parent(spec(true));
  const int64_t t0 = 30 * kSec;
  for (int i = 1; i <= 10; ++i) child.add(t0 + i * kMs, i);
  StepAggregate step;
  Sketch sketch;
  ASSERT_TRUE(child.collectStep(child.stepOf(t0), step, &sketch));
  EXPECT_FALSE(child.collectStep(child.stepOf(t0) + 1, step, nullptr));
  EXPECT_EQ(step.count, 10u);
  EXPECT_EQ(step.sum, 55);
  EXPECT_EQ(step.last, 10);
  ASSERT_TRUE(parent.mergeAt(t0 + 200 * kMs, step, &sketch));
  ASSERT_TRUE(parent.mergeAt(t0 + 200 * kMs, step, &sketch));
  Sketch merged;
  StepAggregate a = collect(parent, t0 + 200 * kMs, &merged);
  EXPECT_EQ(a.count, 20u);
  EXPECT_EQ(a.sum, 110);
  EXPECT_EQ(a.min, 1);
  EXPECT_EQ(a.max, 10);
  EXPECT_EQ(merged.count(), 20u);
}

}  // namespace
}  // namespace bpftrain::collector::window
