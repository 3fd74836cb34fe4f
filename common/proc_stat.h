// Fields of a /proc/PID/stat line, numbered as proc(5) numbers them (1: pid, 2: comm, 3: state,
// ...). The command may hold spaces and parentheses, so fields are counted from the last ')'.
// Rank discovery reads ppid and starttime, the faults probe minflt and majflt.
#pragma once

#include <algorithm>
#include <optional>
#include <string_view>

namespace bpftrain {

// The text of field `field` (>= 3), or nullopt when the line has fewer fields or no command.
inline std::optional<std::string_view> procStatField(std::string_view stat, int field) {
  const size_t comm_end = stat.rfind(')');
  if (comm_end == std::string_view::npos || field < 3) return std::nullopt;
  std::string_view rest = stat.substr(comm_end + 1);
  for (int f = 3;; ++f) {
    const size_t start = rest.find_first_not_of(' ');
    if (start == std::string_view::npos) return std::nullopt;
    rest.remove_prefix(start);
    const size_t end = std::min(rest.find(' '), rest.size());
    if (f == field) return rest.substr(0, end);
    rest.remove_prefix(end);
  }
}

}  // namespace bpftrain
