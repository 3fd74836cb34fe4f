#include "collector/ingest/statsd.h"

#include <charconv>
#include <cmath>
#include <cstring>

namespace bpftrain::collector::ingest {
namespace {

// Position of c in s at or after `from`, or npos. Inline: lines are short, and a memchr call
// per separator cost more than the scan itself in profiles.
inline size_t findChar(std::string_view s, char c, size_t from = 0) {
  for (size_t i = from; i < s.size(); ++i)
    if (s[i] == c) return i;
  return std::string_view::npos;
}

bool parseDouble(std::string_view s, double& out) {
  if (s.empty()) return false;
  if (s.empty()) return false;
  const char* b = s.data();
  const char* e = b + s.size();
  bool neg = false;
  if (*b == '+' || *b == '-') {  // from_chars takes '-' but not '+'
    neg = *b == '-';
    ++b;
  }
  // Fast path for plain decimals ("42", "12.5"): digits < 2^53 and at most 15 fraction digits
  // divide exactly-rounded by a power of ten (Clinger's fast path), the same result from_chars
  // gives. Anything else (exponents, long mantissas, nan/inf) goes to from_chars.
  static constexpr double kPow10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                      1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};
  uint64_t mant = 0;
  int digits = 0, frac = -1;
  const char* p = b;
  for (; p < e; ++p) {
    if (*p >= '0' && *p <= '9') {
      mant = mant * 10 + uint64_t(*p - '0');
      ++digits;
      if (frac >= 0) ++frac;
    } else if (*p == '.' && frac < 0) {
      frac = 0;
    } else {
      break;
    }
  }
  if (p == e && digits > 0 && digits <= 15 && frac != 0) {
    double v = double(mant);
    if (frac > 0) v /= kPow10[frac];
    out = neg ? -v : v;
    return true;
  }
  // "--1", "+-1"; a lone sign ("+", "-") has nothing after it (found by fuzz.statsd under ASan).
  if (b == e || *b == '-' || *b == '+') return false;
  auto [q, ec] = std::from_chars(b, e, out);
  if (ec != std::errc() || q != e) return false;
  if (neg) out = -out;
  return true;
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
    bool ok =
        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
    if (c == '.' || c == '-')
      c = '_';
    else if (!ok)
      return 0;
    out[n++] = c;
  }
  return n;
}

namespace {

// Adds one "k<sep>v" tag. A tag without a separator has no value: dropped and counted (the line is
// kept). An empty name or value is an error, as in statsd_exporter.
std::optional<DecodeReason> addTag(std::string_view tag, char sep, StatsdLine& out) {
  if (tag.empty()) return std::nullopt;
  if (out.tag_count + out.valueless_tags == kMaxStatsdTags) return DecodeReason::kLabelFlood;
  size_t c = findChar(tag, sep);
  if (c == std::string_view::npos) {
    if (tag.size() > kMaxStatsdNameLength) return DecodeReason::kBadTag;
    ++out.valueless_tags;
    return std::nullopt;
  }
  if (c == 0 || c + 1 == tag.size() || c > kMaxStatsdNameLength) return DecodeReason::kBadTag;
  if (tag.size() - c - 1 > kMaxStatsdTagValueLength) return DecodeReason::kLabelFlood;
  out.tags[out.tag_count++] = StatsdTag{tag.substr(0, c), tag.substr(c + 1)};
  return std::nullopt;
}

std::optional<DecodeReason> addTags(std::string_view tags, char sep, StatsdLine& out) {
  while (!tags.empty()) {
    size_t comma = findChar(tags, ',');
    if (auto e = addTag(tags.substr(0, comma), sep, out)) return e;
    tags = comma == std::string_view::npos ? std::string_view() : tags.substr(comma + 1);
  }
  return std::nullopt;
}

// Tags carried in the name field: SignalFX "a[k=v]b", else Librato "a#k=v" or InfluxDB "a,k=v".
// Sets out.name; true in `had_tags` when the name carried a tag section.
std::optional<DecodeReason> splitNameTags(std::string_view field, StatsdLine& out, bool& had_tags) {
  had_tags = false;
  out.name = field;
  // One pass for the common case (no tags in the name): the first character that starts any style.
  size_t first = 0;
  while (first < field.size() && field[first] != '[' && field[first] != ']' &&
         field[first] != '#' && field[first] != ',')
    ++first;
  if (first == field.size()) return std::nullopt;
  size_t open = findChar(field, '['), close = findChar(field, ']');
  if (open != std::string_view::npos || close != std::string_view::npos) {
    if (open == std::string_view::npos || close == std::string_view::npos || close < open)
      return DecodeReason::kBadTag;
    had_tags = true;
    size_t head = open, tail = field.size() - close - 1;
    std::memcpy(out.name_buf, field.data(), head);
    std::memcpy(out.name_buf + head, field.data() + close + 1, tail);
    out.name = std::string_view(out.name_buf, head + tail);
    return addTags(field.substr(open + 1, close - open - 1), '=', out);
  }
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '#' || field[i] == ',') {
      had_tags = true;
      out.name = field.substr(0, i);
      return addTags(field.substr(i + 1), '=', out);
    }
  }
  return std::nullopt;
}

bool allDigits(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s)
    if (c < '0' || c > '9') return false;
  return true;
}

}  // namespace

std::optional<DecodeReason> parseStatsdLine(std::string_view line, StatsdLine& out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  out.ignored = IgnoredReason::kNone;
  out.tag_count = 0;
  out.valueless_tags = 0;
  // DogStatsD events and service checks: not metrics; understood, counted, not stored.
  if (line.starts_with("_e{")) {
    out.ignored = IgnoredReason::kEvent;
    return std::nullopt;
  }
  if (line.starts_with("_sc|")) {
    out.ignored = IgnoredReason::kServiceCheck;
    return std::nullopt;
  }
  size_t colon = findChar(line, ':');
  if (colon == std::string_view::npos || colon == 0) return DecodeReason::kBadLine;
  out.key_name = line.substr(0, colon);
  if (out.key_name.size() > kMaxStatsdNameLength) return DecodeReason::kOversized;
  std::string_view rest = line.substr(colon + 1);
  size_t bar = findChar(rest, '|');
  if (bar == std::string_view::npos) return DecodeReason::kBadLine;
  std::string_view value = rest.substr(0, bar);
  rest = rest.substr(bar + 1);
  bar = findChar(rest, '|');
  std::string_view type = rest.substr(0, bar);
  rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);

  if (type == "c")
    out.type = StatsdType::kCounter;
  else if (type == "g")
    out.type = StatsdType::kGauge;
  else if (type == "ms")
    out.type = StatsdType::kTimerMs;
  else if (type == "h" || type == "d")
    out.type = StatsdType::kHistogram;
  else if (type == "s")
    out.type = StatsdType::kSet;
  else
    return DecodeReason::kBadType;

  out.relative = false;
  out.set_value = {};
  if (out.type == StatsdType::kSet) {
    // A member is any text (etsy statsd counts whatever it is given); it is hashed, not parsed.
    if (value.empty() || value.size() > kMaxStatsdTagValueLength) return DecodeReason::kBadValue;
    out.set_value = value;
    out.value = 0;
  } else {
    if (!parseDouble(value, out.value)) {
      // from_chars reads "nan"/"inf", so anything left here is not a number at all.
      return DecodeReason::kBadValue;
    }
    if (!std::isfinite(out.value)) return DecodeReason::kNonFinite;
    out.relative = out.type == StatsdType::kGauge && (value[0] == '+' || value[0] == '-');
    if (out.type == StatsdType::kCounter && out.value < 0) return DecodeReason::kBadValue;
  }

  bool name_tags;
  if (auto e = splitNameTags(out.key_name, out, name_tags)) return e;
  if (out.name.empty()) return DecodeReason::kBadLine;

  out.sample_rate = 1;
  out.tags_raw = {};
  out.container = {};
  // Optional sections in any order: |@rate, |#tags, |c:container, |Ttimestamp, |e:, |card:.
  while (!rest.empty()) {
    bar = findChar(rest, '|');
    std::string_view section = rest.substr(0, bar);
    rest = bar == std::string_view::npos ? std::string_view() : rest.substr(bar + 1);
    if (section.size() >= 2 && section[0] == '@') {
      double rate;
      if (!parseDouble(section.substr(1), rate) || !(rate > 0 && rate <= 1))
        return DecodeReason::kBadSampleRate;
      out.sample_rate = rate;
    } else if (!section.empty() && section[0] == '#') {
      if (name_tags) return DecodeReason::kMixedTags;
      if (!out.tags_raw.empty()) return DecodeReason::kBadLine;  // one tag section per line
      out.tags_raw = section.substr(1);
      if (auto e = addTags(out.tags_raw, ':', out)) return e;
    } else if (section.size() >= 2 && section[0] == 'c' && section[1] == ':') {
      out.container = section.substr(2);
      if (out.container.empty()) return DecodeReason::kBadLine;
      if (out.container.size() > kMaxStatsdTagValueLength) return DecodeReason::kLabelFlood;
    } else if (!section.empty() && section[0] == 'T') {
      if (!allDigits(section.substr(1))) return DecodeReason::kBadLine;
    } else if (section.starts_with("e:") || section.starts_with("card:")) {
      // DogStatsD origin detection (external data) and tag cardinality: for the Datadog agent's
      // tagger, with nothing to map to here.
    } else {
      return DecodeReason::kBadLine;
    }
  }
  if (!out.container.empty()) {
    if (out.tag_count + out.valueless_tags == kMaxStatsdTags) return DecodeReason::kLabelFlood;
    out.tags[out.tag_count++] = StatsdTag{"container_id", out.container};
  }
  return std::nullopt;
}

}  // namespace bpftrain::collector::ingest
