// The screen of bpftrain-top as text lines, laid out for a width and height. Pure: the ncurses
// painter in top_main.cc draws these lines, and tests check them without a terminal.
#pragma once

#include <string>
#include <vector>

#include "collector/top/model.h"

namespace bpftrain::top {

struct Header {
  std::string source;  // the collector's /metrics address
  double interval_s = 1;
  std::string status;  // "" when the last scrape worked, else what failed
  std::string clock;   // wall time of the last scrape, HH:MM:SS
};

// At most `height` lines, none wider than `width`. Sections in order: header, throughput and
// configuration, the per-rank table (cut to what fits, saying how many are hidden), decisions,
// host, transport, collector.
std::vector<std::string> renderScreen(const JobView& view, const Header& header, int width,
                                      int height);

// Human units: "1.25ms", "3.4GB/s", "12.0k".
std::string formatSeconds(double s);
std::string formatBytes(double b);
std::string formatCount(double c);

}  // namespace bpftrain::top
