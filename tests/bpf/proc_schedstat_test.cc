// The runqueue_wait module's /proc/PID/task/TID/schedstat parser: fixed lines, and this thread's
// own line, whose wait never goes down.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "collector/loader/probes/sched_wait.h"

namespace bpftrain::collector::loader::probes::sched_wait {
namespace {

TEST(ProcSchedstat, TheSecondNumberIsTheRunqueueWait) {
  EXPECT_EQ(parseRunqueueWaitNs("806275 3150502 2\n"), 3150502u);
  EXPECT_EQ(parseRunqueueWaitNs("0 0 0"), 0u);
  EXPECT_EQ(parseRunqueueWaitNs("18446744073709551615 18446744073709551615 7\n"),
            18446744073709551615u);
}

TEST(ProcSchedstat, NotASchedstatLine) {
  EXPECT_EQ(parseRunqueueWaitNs(""), std::nullopt);
  EXPECT_EQ(parseRunqueueWaitNs("806275"), std::nullopt);
  EXPECT_EQ(parseRunqueueWaitNs("806275 3150502"), std::nullopt);  // no timeslices
  EXPECT_EQ(parseRunqueueWaitNs("806275 x 2"), std::nullopt);
  EXPECT_EQ(parseRunqueueWaitNs(" 1 2 3"), std::nullopt);
  EXPECT_EQ(parseRunqueueWaitNs("1 -2 3"), std::nullopt);
}

TEST(ProcSchedstat, ThisThreadsOwnLine) {
  std::ifstream in("/proc/thread-self/schedstat");
  if (!in) GTEST_SKIP() << "no /proc/thread-self/schedstat: this kernel keeps no schedstat";
  std::stringstream text;
  text << in.rdbuf();
  ASSERT_TRUE(parseRunqueueWaitNs(text.str()).has_value()) << text.str();
}

}  // namespace
}  // namespace bpftrain::collector::loader::probes::sched_wait
