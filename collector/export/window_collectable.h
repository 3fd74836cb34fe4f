// Prometheus view of the series store: on every scrape Collect() takes a snapshot of the windows
// and turns it into metric families, so the ingest path never touches the exporter.
//  - counters      -> `<name>_total` counter: everything since the series was created
//  - gauges        -> gauge: the last value
//  - distributions -> summary: quantiles 0.5/0.9/0.99 from the window's sketch, _sum and _count
//                     over the window (not cumulative: they slide with the window)
// Plus the store's own health (series count, rejected series, late samples, memory).
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "collector/window/series_store.h"

// `export` is a C++ keyword, so collector/export/ lives in namespace `exporter`.
namespace bpftrain::collector::exporter {

struct WindowCollectableOptions {
  // Time of the snapshot (CLOCK_MONOTONIC ns); tests pass a synthetic clock.
  std::function<int64_t()> clock = window::monotonicNowNs;
  bool store_health = true;  // export bpftrain_collector_series etc.
};

class WindowCollectable : public prometheus::Collectable {
 public:
  explicit WindowCollectable(const window::SeriesStore& store,
                             WindowCollectableOptions options = {});

  std::vector<prometheus::MetricFamily> Collect() const override;

  // Series skipped because their exported name was already taken by a series of another kind.
  uint64_t kindConflicts() const { return conflicts_.load(std::memory_order_relaxed); }

 private:
  const window::SeriesStore& store_;
  WindowCollectableOptions options_;
  mutable std::atomic<uint64_t> conflicts_{0};
  mutable std::atomic<bool> conflict_logged_{false};
};

// The exported family name of a series: counters get `_total` unless they already end with it.
std::string exportedName(std::string_view name, window::SeriesKind kind);

}  // namespace bpftrain::collector::exporter
