#include "collector/top/metrics_text.h"

#include <cmath>
#include <cstdlib>
#include <limits>

namespace bpftrain::top {
namespace {

bool nameChar(char c, bool first) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
         (!first && c >= '0' && c <= '9');
}

bool parseValue(std::string_view v, double& out) {
  if (v == "NaN") {
    out = std::numeric_limits<double>::quiet_NaN();
    return true;
  }
  if (v == "+Inf" || v == "Inf") {
    out = std::numeric_limits<double>::infinity();
    return true;
  }
  if (v == "-Inf") {
    out = -std::numeric_limits<double>::infinity();
    return true;
  }
  std::string s(v);
  char* end = nullptr;
  out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

// One sample line; false when malformed.
bool parseLine(std::string_view line, Sample& s) {
  size_t i = 0;
  while (i < line.size() && nameChar(line[i], i == 0)) ++i;
  if (i == 0) return false;
  s.name.assign(line.substr(0, i));
  s.labels.clear();
  if (i < line.size() && line[i] == '{') {
    ++i;
    for (;;) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i < line.size() && line[i] == '}') {
        ++i;
        break;
      }
      size_t k = i;
      while (i < line.size() && nameChar(line[i], i == k)) ++i;
      if (i == k || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') return false;
      std::string key(line.substr(k, i - k));
      i += 2;
      std::string value;
      for (;; ++i) {
        if (i >= line.size()) return false;
        char c = line[i];
        if (c == '"') break;
        if (c == '\\' && i + 1 < line.size()) {
          char e = line[++i];
          value += e == 'n' ? '\n' : e;  // \\ and \" stand for themselves
        } else {
          value += c;
        }
      }
      ++i;  // closing quote
      s.labels.emplace_back(std::move(key), std::move(value));
    }
  }
  while (i < line.size() && line[i] == ' ') ++i;
  size_t v = i;
  while (i < line.size() && line[i] != ' ') ++i;
  return parseValue(line.substr(v, i - v), s.value);
}

}  // namespace

std::string_view Sample::label(std::string_view key) const {
  for (const auto& [k, v] : labels)
    if (k == key) return v;
  return {};
}

ParsedMetrics parseMetricsText(std::string_view text) {
  ParsedMetrics out;
  while (!text.empty()) {
    size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    if (parseLine(line, s))
      out.samples.push_back(std::move(s));
    else
      ++out.bad_lines;
  }
  return out;
}

}  // namespace bpftrain::top
