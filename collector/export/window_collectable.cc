#include "collector/export/window_collectable.h"

#include <cstdio>
#include <limits>
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
  // The index of the family for `name` of `type`; kConflict when the name has another type.
  constexpr size_t kConflict = ~size_t{0};
  auto familyFor = [&](std::string name, std::string_view stored, SeriesKind kind,
                       prometheus::MetricType type, bool histogram) -> size_t {
    auto [it, fresh] = by_name.try_emplace(std::move(name), families.size());
    if (fresh) {
      std::string help = helpFor(stored, kind);
      if (histogram) help += " (cumulative histogram: aggregate with sum by (le))";
      families.push_back(MetricFamily{it->first, std::move(help), type, {}});
    } else if (families[it->second].type != type) {
      ++conflicts;
      return kConflict;
    }
    return it->second;
  };
  for (window::SeriesSnapshot& s : snap) {
    const size_t family =
        familyFor(exportedName(s.name, s.kind), s.name, s.kind, prometheusType(s.kind), false);
    if (family == kConflict) continue;
    ClientMetric m;
    m.label.reserve(s.labels.size());
    if (!s.bucket_bounds.empty()) {
      // Distributions with catalogue bucket bounds are also `<name>_hist`: cumulative since
      // the series was created, so rates and sums across ranks and hosts hold. (`_hist`, not
      // `_histogram`: promtool check metrics refuses a type name in a metric name.)
      if (const size_t hf =
              familyFor(s.name + "_hist", s.name, s.kind, prometheus::MetricType::Histogram, true);
          hf != kConflict) {
        ClientMetric h;
        h.label.reserve(s.labels.size());
        for (const auto& [k, v] : s.labels) h.label.push_back({k, v});
        h.histogram.sample_count = s.bucket_counts.back();
        h.histogram.sample_sum = s.total;
        h.histogram.bucket.reserve(s.bucket_counts.size());
        for (size_t b = 0; b < s.bucket_bounds.size(); ++b)
          h.histogram.bucket.push_back({s.bucket_counts[b], s.bucket_bounds[b]});
        h.histogram.bucket.push_back(
            {s.bucket_counts.back(), std::numeric_limits<double>::infinity()});
        families[hf].metric.push_back(std::move(h));
      }
    }
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
    families[family].metric.push_back(std::move(m));
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
    families.push_back(single(metrics::kCollectorSeriesExpired, double(store_.expiredSeries())));
    families.push_back(single(metrics::kCollectorLateSamples, double(store_.lateSamples())));
    families.push_back(single(metrics::kCollectorWindowMemoryBytes, double(store_.memoryBytes())));
    families.push_back(single(metrics::kCollectorExportConflicts, double(kindConflicts())));
  }
  return families;
}

}  // namespace bpftrain::collector::exporter
