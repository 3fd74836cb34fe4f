// The throughput rise (throughput_rise.h): its level since the mark, the settling readings it
// skips, the steps in a row, and that a rise never becomes the level.
#include "collector/controller/throughput_rise.h"

#include <gtest/gtest.h>

namespace bpftrain::collector::controller {
namespace {

constexpr int64_t kStepNs = 500'000'000;

TEST(ThroughputRise, RisesOverItsLevelSinceTheMarkForItsStepsInARow) {
  ThroughputRise r;  // 1.15x, 2 steps, 6 readings, 2 s settle
  EXPECT_FALSE(r.update(1000, 0)) << "no mark yet";
  r.restart(0);
  int64_t t = 0;
  // Settling (the window still holds the previous rung's steps): 9000 is not the level.
  for (; t < 2'000'000'000; t += kStepNs) EXPECT_FALSE(r.update(9000, t));
  // Six readings of 1000 make the level; before them nothing is a rise.
  for (int i = 0; i < 6; ++i, t += kStepNs) EXPECT_FALSE(r.update(1000, t));
  EXPECT_FALSE(r.update(1140, t)) << "under 1.15x";
  t += kStepNs;
  EXPECT_FALSE(r.update(1200, t)) << "one step";
  t += kStepNs;
  EXPECT_FALSE(r.update(1000, t)) << "not in a row";
  t += kStepNs;
  EXPECT_FALSE(r.update(1200, t));
  t += kStepNs;
  EXPECT_TRUE(r.update(1200, t));
  EXPECT_NE(r.why("since the climb").find("rose to 1200, 1.18x its 1018 since the climb, for 2"),
            std::string::npos)
      << r.why("since the climb");
  // The rises did not become the level (1000 x6, 1140, 1000: 1017.5).
  t += kStepNs;
  EXPECT_TRUE(r.update(1180, t));
  r.restart(t);
  EXPECT_FALSE(r.update(1200, t + 3 * kStepNs)) << "a new level from the restart";
}

// The latest step at the factor too makes the first risen window the verdict; the latest step
// alone is no rise, and does not become the level either.
TEST(ThroughputRise, TheLatestStepRisenTooIsTheVerdictAtTheFirstRisenWindow) {
  ThroughputRise r;  // 1.15x, 2 steps, 6 readings, 2 s settle
  r.restart(0);
  int64_t t = 2'000'000'000;
  for (int i = 0; i < 6; ++i, t += kStepNs) EXPECT_FALSE(r.update(1000, t, 1000));
  EXPECT_FALSE(r.update(1000, t, 1500)) << "the latest step alone";
  t += kStepNs;
  EXPECT_FALSE(r.update(1200, t, 1100)) << "the window alone, one step";
  t += kStepNs;
  EXPECT_FALSE(r.update(1000, t, 1000));
  t += kStepNs;
  EXPECT_TRUE(r.update(1200, t, 1160)) << "both at 1.15x the level (1000)";
  EXPECT_NE(r.why("since the climb")
                .find("rose to 1200, 1.20x its 1000 since the climb, the "
                      "latest step at 1160"),
            std::string::npos)
      << r.why("since the climb");
}

}  // namespace
}  // namespace bpftrain::collector::controller
