// StatsD / DogStatsD line parsing and the statsd_exporter name mapping. Views into the datagram,
// fixed-size outputs: nothing here allocates.
//
// Accepted as clients speak it (statsd_exporter's parser is the reference):
//  - types c, g (a leading sign is a delta), ms, h, d, and s (sets: the value is any text);
//  - sections after the type in any order: |@rate, |#tags (DogStatsD), |c:ID (DogStatsD container,
//    becomes the label container_id), |T<unix seconds> (DogStatsD timestamp, validated and not
//    used: samples are stored at arrival, as statsd_exporter does);
//  - tags in the name, one style per line: Librato "name#k=v,k2=v2", InfluxDB "name,k=v",
//    SignalFX "name[k=v]rest" (the name is "namerest"); mixed with |# is an error, as there;
//  - value-less tags ("|#canary,env:prod"): the tag is dropped and counted as ignored;
//  - DogStatsD events ("_e{...}") and service checks ("_sc|...") are understood, not stored, and
//    counted as ignored, never as errors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "collector/ingest/ingest_stats.h"

namespace bpftrain::collector::ingest {

inline constexpr size_t kMaxStatsdTags = 8;          // more is a label flood
inline constexpr size_t kMaxStatsdNameLength = 200;  // metric and tag names, before mapping
inline constexpr size_t kMaxStatsdTagValueLength = 128;
inline constexpr int kMaxTimerRepeat = 100;  // bound on 1/@rate replays of a timer sample

enum class StatsdType : uint8_t { kCounter, kGauge, kTimerMs, kHistogram, kSet };

struct StatsdTag {
  std::string_view name;
  std::string_view value;
};

struct StatsdLine {
  std::string_view name;       // metric name without name-embedded tags (may point into name_buf)
  std::string_view key_name;   // the name field as sent, tags included (part of the series key)
  double value = 0;            // not for sets
  std::string_view set_value;  // sets: the member as sent
  bool relative = false;       // gauge written with an explicit sign: a delta, not a value
  StatsdType type = StatsdType::kGauge;
  double sample_rate = 1;
  std::string_view tags_raw;   // "k:v,k2:v2" as sent after |# (part of the series key)
  std::string_view container;  // |c:ID (part of the series key; label container_id)
  StatsdTag tags[kMaxStatsdTags];
  size_t tag_count = 0;
  size_t valueless_tags = 0;  // tags dropped for having no value
  // Not a sample: an event or a service check, understood and not stored (kNone: a sample).
  IgnoredReason ignored = IgnoredReason::kNone;
  char name_buf[kMaxStatsdNameLength];  // SignalFX: the name with its [...] cut out
};

// Parses one line without its '\n'. Returns the reason on error. On success, out.ignored says
// whether the line is a sample (kNone) or something understood and not stored.
std::optional<DecodeReason> parseStatsdLine(std::string_view line, StatsdLine& out);

// statsd_exporter's default mapping of a StatsD name to a Prometheus name: '.' and '-' become
// '_', a leading digit gets a '_' prefix. Writes into out[0, cap) and returns the length, or 0
// when the name holds any other character outside [A-Za-z0-9_] (counted as bad_name) or does
// not fit.
size_t mapStatsdName(std::string_view raw, char* out, size_t cap);

}  // namespace bpftrain::collector::ingest
