// numa_hints' parser of /proc/PID/task/TID/sched against the text 6.1 and 6.18 print.
#include <gtest/gtest.h>

#include "collector/loader/probes/numa_hints.h"

namespace bpftrain::collector::loader::probes::numa_hints {
namespace {

// Captured in tools/numalab's guest (6.1, two nodes) while a task on node 0 swept node-1 memory.
constexpr const char* kTwoNodes =
    "mm->numa_scan_seq                            :                   12\n"
    "numa_pages_migrated                          :                    0\n"
    "numa_preferred_nid                           :                    1\n"
    "total_numa_faults                            :                 4096\n"
    "current_node=0, numa_group_id=0\n"
    "numa_faults node=0 task_private=3 task_shared=1 group_private=0 group_shared=0\n"
    "numa_faults node=1 task_private=4000 task_shared=92 group_private=0 group_shared=0\n";

TEST(SchedNumaFaults, SumsTheRunningNodeAsLocal) {
  auto faults = parseSchedNumaFaults(kTwoNodes);
  ASSERT_TRUE(faults);
  EXPECT_EQ(faults->local, 4u);
  EXPECT_EQ(faults->total, 4096u);
}

TEST(SchedNumaFaults, OneNodeWithoutFaults) {
  // This build host (6.18, one node, NUMA balancing off).
  auto faults = parseSchedNumaFaults(
      "total_numa_faults                            :                    0\n"
      "current_node=0, numa_group_id=0\n"
      "numa_faults node=0 task_private=0 task_shared=0 group_private=0 group_shared=0\n");
  ASSERT_TRUE(faults);
  EXPECT_EQ(faults->total, 0u);
}

TEST(SchedNumaFaults, NothingWithoutTheStatistics) {
  EXPECT_FALSE(parseSchedNumaFaults("se.sum_exec_runtime : 1.0\nnr_switches : 3\n"));
  // A numa_faults line without the node it runs on says nothing about locality.
  EXPECT_FALSE(parseSchedNumaFaults("numa_faults node=0 task_private=1 task_shared=0\n"));
}

}  // namespace
}  // namespace bpftrain::collector::loader::probes::numa_hints
