#include "collector/export/window_collectable.h"

#include <cstdio>
#include <unordered_map>

#include "collector/export/catalogue_family.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::exporter {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using window::SeriesKind;

// HELP of a family: the catalogue's text for our metrics, a line naming the kind for a user's own.
std::string helpFor(std::string_view name, SeriesKind kind) {
  if (const metrics::MetricDef* def = metrics::find(name)) return std::string(def->help);
  switch (kind) {
    case SeriesKind::kCounter:
      return "counter (not a bpftrain metric): total since the collector first saw it";
    case SeriesKind::kGauge:
      return "gauge (not a bpftrain metric): last value received";
    case SeriesKind::kDistribution:
      return "distribution (not a bpftrain metric): quantiles, sum and count over the sliding "
             "window";
  }
  return "";
}

MetricFamily single(const metrics::MetricDef& def, double value) {
  MetricFamily f = familyOf(def);
  addPoint(f, value);
  return f;
}

}  // namespace

std::string exportedName(std::string_view name, SeriesKind kind) {
  std::string out(name);
  constexpr std::string_view kTotal = "_total";
  if (kind == SeriesKind::kCounter &&
      !(out.size() >= kTotal.size() &&
        out.compare(out.size() - kTotal.size(), kTotal.size(), kTotal) == 0))
    out += kTotal;
  return out;
}

WindowCollectable::WindowCollectable(const window::SeriesStore& store,
                                     WindowCollectableOptions options)
    : store_(store), options_(std::move(options)) {
  if (!options_.clock) options_.clock = window::monotonicNowNs;
}

std::vector<MetricFamily> WindowCollectable::Collect() const {
  std::vector<window::SeriesSnapshot> snap = store_.snapshot(options_.clock());
  std::vector<MetricFamily> families;
  std::unordered_map<std::string, size_t> by_name;
  uint64_t conflicts = 0;
  for (window::SeriesSnapshot& s : snap) {
    std::string name = exportedName(s.name, s.kind);
    auto [it, fresh] = by_name.try_emplace(name, families.size());
    if (fresh) {
      families.push_back(MetricFamily{name, helpFor(s.name, s.kind), prometheusType(s.kind), {}});
    } else if (families[it->second].type != prometheusType(s.kind)) {
      ++conflicts;
      continue;
    }
    ClientMetric m;
    m.label.reserve(s.labels.size());
    for (auto& [k, v] : s.labels) m.label.push_back({std::move(k), std::move(v)});
    switch (s.kind) {
      case SeriesKind::kCounter:
        m.counter.value = s.total;
        break;
      case SeriesKind::kGauge:
        m.gauge.value = s.last;
        break;
      case SeriesKind::kDistribution:
        m.summary.sample_count = s.count;
        m.summary.sample_sum = s.sum;
        for (auto [q, v] : s.quantiles) m.summary.quantile.push_back({q, v});
        break;
    }
    families[it->second].metric.push_back(std::move(m));
  }
  if (conflicts) {
    conflicts_.fetch_add(conflicts, std::memory_order_relaxed);
    if (!conflict_logged_.exchange(true))
      std::fprintf(stderr,
                   "bpftrain-collector: %llu series not exported: their name is already used by a "
                   "series of another kind (see bpftrain_collector_export_conflicts_total); give "
                   "counters, gauges and timers distinct names\n",
                   static_cast<unsigned long long>(conflicts));
  }
  if (options_.store_health) {
    families.push_back(single(metrics::kCollectorSeries, double(store_.seriesCount())));
    families.push_back(single(metrics::kCollectorSeriesRejected, double(store_.rejectedSeries())));
    families.push_back(single(metrics::kCollectorLateSamples, double(store_.lateSamples())));
    families.push_back(single(metrics::kCollectorWindowMemoryBytes, double(store_.memoryBytes())));
    families.push_back(single(metrics::kCollectorExportConflicts, double(kindConflicts())));
  }
  return families;
}

}  // namespace bpftrain::collector::exporter
