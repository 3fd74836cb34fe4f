// StatsD / DogStatsD line parsing and the statsd_exporter name mapping. Views into the datagram,
// fixed-size outputs: nothing here allocates.
#pragma once

#include <cstddef>
#include <optional>
#include <string_view>

#include "collector/ingest/ingest_stats.h"

namespace bpftrain::collector::ingest {

inline constexpr size_t kMaxStatsdTags = 8;          // more is a label flood
inline constexpr size_t kMaxStatsdNameLength = 200;  // metric and tag names, before mapping
inline constexpr size_t kMaxStatsdTagValueLength = 128;
inline constexpr int kMaxTimerRepeat = 100;  // bound on 1/@rate replays of a timer sample

enum class StatsdType : uint8_t { kCounter, kGauge, kTimerMs, kHistogram };

struct StatsdTag {
  std::string_view name;
  std::string_view value;
};

struct StatsdLine {
  std::string_view name;  // as sent
  double value = 0;
  bool relative = false;  // gauge written with an explicit sign: a delta, not a value
  StatsdType type = StatsdType::kGauge;
  double sample_rate = 1;
  std::string_view tags_raw;  // "k:v,k2:v2" as sent (part of the series key)
  StatsdTag tags[kMaxStatsdTags];
  size_t tag_count = 0;
};

// Parses one line without its '\n'. Returns the reason on error.
std::optional<DecodeReason> parseStatsdLine(std::string_view line, StatsdLine& out);

// statsd_exporter's default mapping of a StatsD name to a Prometheus name: '.' and '-' become
// '_', a leading digit gets a '_' prefix. Writes into out[0, cap) and returns the length, or 0
// when the name holds any other character outside [A-Za-z0-9_] (counted as bad_name) or does
// not fit.
size_t mapStatsdName(std::string_view raw, char* out, size_t cap);

}  // namespace bpftrain::collector::ingest
