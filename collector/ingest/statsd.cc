#include "collector/ingest/statsd.h"

#include <charconv>
#include <cmath>

namespace bpftrain::collector::ingest {
namespace {

bool parseDouble(std::string_view s, double& out) {
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = b + s.size();
  if (*b == '+') ++b;  // from_chars takes '-' but not '+'
  auto [p, ec] = std::from_chars(b, e, out);
  return ec == std::errc() && p == e;
}

}  // namespace

size_t mapStatsdName(std::string_view raw, char* out, size_t cap) {
  if (raw.empty() || raw.size() > kMaxStatsdNameLength) return 0;
  size_t n = 0;
  if (raw[0] >= '0' && raw[0] <= '9') {
    if (cap < 1) return 0;
    out[n++] = '_';
  }
  if (n + raw.size() > cap) return 0;
  for (char c : raw) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (c == '.' || c == '-') c = '_';
    else if (!ok) return 0;
    out[n++] = c;
  }
  return n;
}

std::optional<DecodeReason> parseStatsdLine(std::string_view line, StatsdLine& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  size_t colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return DecodeReason::kBadLine;
  out.name = line.substr(0, colon);
  if (out.name.size() > kMaxStatsdNameLength) return DecodeReason::kOversized;
  std::string_view rest = line.substr(colon + 1);
  size_t bar = rest.find('|');
  if (bar == std::string_view::npos) return DecodeReason::kBadLine;
  std::string_view value = rest.substr(0, bar);
  rest = rest.substr(bar + 1);
  bar = rest.find('|');
  std::string_view type = rest.substr(0, bar);
  rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);

  if (type == "c") out.type = StatsdType::kCounter;
  else if (type == "g") out.type = StatsdType::kGauge;
  else if (type == "ms") out.type = StatsdType::kTimerMs;
  else if (type == "h" || type == "d") out.type = StatsdType::kHistogram;
  else return DecodeReason::kBadType;

  if (!parseDouble(value, out.value)) {
    // from_chars reads "nan"/"inf", so anything left here is not a number at all.
    return DecodeReason::kBadValue;
  }
  if (!std::isfinite(out.value)) return DecodeReason::kNonFinite;
  out.relative = out.type == StatsdType::kGauge && (value[0] == '+' || value[0] == '-');
  if (out.type == StatsdType::kCounter && out.value < 0) return DecodeReason::kBadValue;

  out.sample_rate = 1;
  out.tags_raw = {};
  out.tag_count = 0;
  // Optional sections in any order: |@rate and |#tags.
  while (!rest.empty()) {
    bar = rest.find('|');
    std::string_view section = rest.substr(0, bar);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
    if (section.size() >= 2 && section[0] == '@') {
      double rate;
      if (!parseDouble(section.substr(1), rate) || !(rate > 0 && rate <= 1))
        return DecodeReason::kBadSampleRate;
      out.sample_rate = rate;
    } else if (!section.empty() && section[0] == '#') {
      out.tags_raw = section.substr(1);
      std::string_view tags = out.tags_raw;
      while (!tags.empty()) {
        size_t comma = tags.find(',');
        std::string_view tag = tags.substr(0, comma);
        tags = comma == std::string_view::npos ? std::string_view() : tags.substr(comma + 1);
        if (tag.empty()) continue;
        if (out.tag_count == kMaxStatsdTags) return DecodeReason::kLabelFlood;
        size_t c = tag.find(':');
        if (c == std::string_view::npos || c == 0 || c + 1 == tag.size())
          return DecodeReason::kBadTag;
        if (c > kMaxStatsdNameLength) return DecodeReason::kBadTag;
        if (tag.size() - c - 1 > kMaxStatsdTagValueLength) return DecodeReason::kLabelFlood;
        out.tags[out.tag_count++] = StatsdTag{tag.substr(0, c), tag.substr(c + 1)};
      }
    } else {
      return DecodeReason::kBadLine;
    }
  }
  return std::nullopt;
}

}  // namespace bpftrain::collector::ingest
