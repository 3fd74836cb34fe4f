// The Prometheus text exposition format (what a collector's /metrics serves), parsed into
// samples. Only what bpftrain-top reads: sample lines with labels and a value; comments, HELP and
// TYPE lines are skipped; timestamps after the value are ignored.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace bpftrain::top {

struct Sample {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // in exposition order
  double value = 0;

  // The label's value, or "" when absent (an empty value and no label mean the same).
  std::string_view label(std::string_view key) const;
};

struct ParsedMetrics {
  std::vector<Sample> samples;
  size_t bad_lines = 0;  // lines that were neither comments nor well-formed samples
};

ParsedMetrics parseMetricsText(std::string_view text);

}  // namespace bpftrain::top
