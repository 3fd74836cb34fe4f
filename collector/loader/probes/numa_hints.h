// What numa_hints reads from the kernel's own NUMA-balancing statistics of one thread
// (/proc/PID/task/TID/sched, CONFIG_NUMA_BALANCING): its recent hinting faults per memory node and
// the node it runs on. Declared here so that the parser is tested without a two-node machine.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace bpftrain::collector::loader::probes::numa_hints {

struct ThreadNumaFaults {
  uint64_t local = 0;  // faults on memory of the node the thread runs on (current_node)
  uint64_t total = 0;  // faults on memory of any node
};

// Parses one sched file: the `current_node=N, numa_group_id=G` line and the
// `numa_faults node=N task_private=P task_shared=S ...` lines (the task's decaying per-node
// counts, kernel/sched/fair.c show_numa_stats). nullopt when the file has neither (a kernel
// without NUMA balancing, or no CONFIG_SCHED_DEBUG before 6.16).
std::optional<ThreadNumaFaults> parseSchedNumaFaults(std::string_view text);

}  // namespace bpftrain::collector::loader::probes::numa_hints
