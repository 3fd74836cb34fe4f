// Checks a /metrics scrape against the metric catalogue: every exported series of a catalogue
// metric carries exactly the labels the catalogue declares (summaries add `quantile`, histogram
// buckets `le`), with the declared type's suffixes. Returns one line per mismatch; empty when the
// scrape agrees.
#pragma once

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/metric_catalogue.h"

namespace bpftrain::testing {

// Label names of a series key as collector_process.h stores it: name{a="x",b="y"}.
inline std::set<std::string> labelNamesOf(const std::string& key) {
  std::set<std::string> names;
  size_t i = key.find('{');
  if (i == std::string::npos) return names;
  ++i;
  while (i < key.size() && key[i] != '}') {
    const size_t eq = key.find('=', i);
    if (eq == std::string::npos) break;
    names.insert(key.substr(i, eq - i));
    i = eq + 2;  // past ="
    while (i < key.size() && key[i] != '"') i += key[i] == '\\' ? 2 : 1;
    i += 1;  // closing quote
    if (i < key.size() && key[i] == ',') ++i;
  }
  return names;
}

inline std::vector<std::string> catalogueMismatches(const std::map<std::string, double>& scrape) {
  std::vector<std::string> problems;
  for (const auto& [key, value] : scrape) {
    std::string name = key.substr(0, key.find('{'));
    if (name.rfind("bpftrain_", 0) != 0) continue;
    const metrics::MetricDef* def = metrics::find(name);
    bool summary_part = false;
    // <name>_hist_{bucket,sum,count} of a distribution with bucket bounds; buckets add `le`.
    bool histogram_part = false, bucket = false;
    for (const char* suffix : {"_hist_bucket", "_hist_sum", "_hist_count"}) {
      const std::string s(suffix);
      if (def == nullptr && name.size() > s.size() && name.ends_with(s)) {
        def = metrics::find(name.substr(0, name.size() - s.size()));
        histogram_part = def != nullptr;
        bucket = histogram_part && s == "_hist_bucket";
      }
    }
    for (const char* suffix : {"_sum", "_count"}) {
      const std::string s(suffix);
      if (def == nullptr && name.size() > s.size() && name.ends_with(s)) {
        def = metrics::find(name.substr(0, name.size() - s.size()));
        summary_part = def != nullptr;
      }
    }
    if (def == nullptr) {
      problems.push_back(key + ": bpftrain_ metric missing from common/metric_catalogue.h");
      continue;
    }
    const bool summary = def->kind == metrics::Kind::kDistribution;
    if (summary_part && !summary) problems.push_back(key + ": _sum/_count of a non-summary");
    if (histogram_part && (!summary || def->buckets.empty()))
      problems.push_back(key + ": a histogram of a metric the catalogue gives no bucket bounds");
    if (def->kind == metrics::Kind::kCounter && !name.ends_with("_total"))
      problems.push_back(key + ": a counter exported without _total");
    std::set<std::string> got = labelNamesOf(key);
    if (summary && !summary_part && !histogram_part) got.erase("quantile");
    if (bucket) got.erase("le");
    std::set<std::string> want;
    std::istringstream in{std::string(def->labels)};
    for (std::string label; in >> label;) want.insert(label);
    if (got != want) {
      std::string g, w;
      for (const auto& l : got) g += l + " ";
      for (const auto& l : want) w += l + " ";
      problems.push_back(key + ": labels {" + g + "} but the catalogue declares {" + w + "}");
    }
  }
  return problems;
}

}  // namespace bpftrain::testing
