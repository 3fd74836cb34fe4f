// What sched_wait reads: the run-queue wait of a task from /proc/PID/task/TID/schedstat.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace bpftrain::collector::loader::probes::sched_wait {

// The second of schedstat's three numbers ("<on-CPU ns> <run-queue wait ns> <timeslices>"), or
// nullopt when the text is not that.
std::optional<uint64_t> parseRunqueueWaitNs(std::string_view schedstat);

}  // namespace bpftrain::collector::loader::probes::sched_wait
