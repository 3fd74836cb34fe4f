// What the faults module reads from /proc/PID/stat for a process target's page faults. Declared
// here so that the parser is tested on fixed text.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace bpftrain::collector::loader::probes::faults {

// minflt + majflt (fields 10 and 12 of proc_pid_stat(5)): the faults the kernel accounted to the
// whole process, exited threads included, its waited-for children not. nullopt when the text is
// not a stat line. The command name (field 2) may hold spaces and parentheses: fields are counted
// from its last ')'.
std::optional<uint64_t> parseStatFaults(std::string_view stat);

}  // namespace bpftrain::collector::loader::probes::faults
