// Figures in a decision's or a diagnosis' text: one printf format, up to three numbers, into a
// string (the texts go to the decisions log and the collector's log, not a hot path).
#pragma once

#include <cstdio>
#include <string>

namespace bpftrain::collector::controller {

inline std::string figures(const char* format, double a, double b = 0, double c = 0) {
  char buf[200];
  std::snprintf(buf, sizeof buf, format, a, b, c);
  return buf;
}

}  // namespace bpftrain::collector::controller
