#include "common/metric_catalogue.h"

#include <array>

namespace bpftrain::metrics {
namespace {

#define BPFTRAIN_METRIC_ADDRESS(id, ...) &id,
constexpr std::array kAll = {BPFTRAIN_METRICS(BPFTRAIN_METRIC_ADDRESS)};
#undef BPFTRAIN_METRIC_ADDRESS

constexpr std::string_view kTotal = "_total";

}  // namespace

std::span<const MetricDef* const> all() { return kAll; }

std::string_view kindName(Kind kind) {
  switch (kind) {
    case Kind::kCounter:
      return "counter";
    case Kind::kGauge:
      return "gauge";
    case Kind::kDistribution:
      return "summary";
  }
  return "";
}

std::string_view storedName(std::string_view name) {
  if (name.size() > kTotal.size() && name.ends_with(kTotal)) name.remove_suffix(kTotal.size());
  return name;
}

const MetricDef* find(std::string_view name) {
  name = storedName(name);
  for (const MetricDef* def : kAll)
    if (def->name == name) return def;
  return nullptr;
}

std::string promName(const MetricDef& def) {
  std::string out(def.name);
  if (def.kind == Kind::kCounter) out += kTotal;
  return out;
}

std::string markdownTable() {
  std::string out =
      "| metric | type | unit | labels | source | what it means |\n"
      "|---|---|---|---|---|---|\n";
  for (const MetricDef* def : kAll) {
    out += "| `" + promName(*def) + "` | " + std::string(kindName(def->kind)) +
           (def->buckets.empty() ? "" : ", histogram") + " | " + std::string(def->unit) + " | " +
           std::string(def->labels.empty() ? "-" : def->labels) + " | " + std::string(def->source) +
           " | ";
    // A literal '|' would end the cell.
    for (char c : def->help) out += c == '|' ? std::string("\\|") : std::string(1, c);
    out += " |\n";
  }
  return out;
}

}  // namespace bpftrain::metrics
