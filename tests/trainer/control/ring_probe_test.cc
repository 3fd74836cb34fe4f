#include "trainer/control/ring_probe.h"

#include <gtest/gtest.h>

namespace bpftrain::trainer::control {
namespace {

// Every rank decides alone from the step and the topology at the boundary: the schedule must be
// a pure function of them.
TEST(RingProbe, OftenOffTheRingRarelyOnItNeverWithoutAdaptive) {
  int off = 0, on = 0, static_run = 0;
  for (uint64_t step = 0; step < 64; ++step) {
    off += ringProbeDue(step, Topology::kHierarchical, true);
    on += ringProbeDue(step, Topology::kRing, true);
    static_run += ringProbeDue(step, Topology::kHierarchical, false);
  }
  EXPECT_EQ(off, int(64 / kRingProbeEveryOffRing) - 1);  // not step 0
  EXPECT_EQ(on, int(64 / kRingProbeEveryOnRing) - 1);
  EXPECT_EQ(static_run, 0);
  EXPECT_FALSE(ringProbeDue(0, Topology::kHierarchical, true));
  EXPECT_TRUE(ringProbeDue(kRingProbeEveryOffRing, Topology::kHalvingDoubling, true));
  EXPECT_FALSE(ringProbeDue(kRingProbeEveryOffRing + 1, Topology::kHierarchical, true));
}

}  // namespace
}  // namespace bpftrain::trainer::control
