// The collector's table of series and their sliding windows: the one interface between ingest
// (writers, one thread per socket), the BPF loader (a writer), the exporter and the controller
// (readers of snapshots). Contract for implementers and callers:
//  - record() is the hot path: no allocation once a series exists, no global lock; safe to call
//    from many threads at once (each ingest thread passes its own writer index).
//  - lookup() allocates only when it creates a series; it fails (returns kRejectedSeries) when
//    the cardinality limit is reached, and counts the rejection.
//  - snapshot() may allocate; it merges writer shards and never blocks writers for long.
//  - A distribution named in the metric catalogue with bucket bounds also counts its samples
//    into cumulative histogram buckets (allocated with the series, one increment per sample).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "collector/window/sketch.h"
#include "common/clock.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::window {

// How a series aggregates: counters sum increments (exported as _total), gauges keep the last
// value, distributions (timers/histograms) keep a quantile sketch over the window. The same
// enum as the metric catalogue's, so that a catalogue entry says how its series is stored.
using SeriesKind = metrics::Kind;

struct Label {
  std::string_view name;
  std::string_view value;
};

struct WindowConfig {
  std::chrono::nanoseconds window = std::chrono::seconds(5);
  std::chrono::nanoseconds step = std::chrono::milliseconds(500);
  size_t max_series = 100'000;
  size_t max_labels_per_series = 16;
  double relative_error = 0.01;  // quantile sketch guarantee
  int writers = 1;               // number of concurrent writer threads (ingest sockets + loader)
  // Series with no sample and no lookup for this long leave the store (expireIdle()); 0: never.
  std::chrono::nanoseconds series_ttl{0};
  // Series that never expire whatever the TTL (e.g. those a writer caches ids of without
  // watching expiryEpoch()); empty: every series may expire.
  std::function<bool(std::string_view name)> keep;
};

using SeriesId = uint32_t;
inline constexpr SeriesId kRejectedSeries = ~SeriesId{0};

// One series' view over the current window (the last `window` of completed steps plus the
// step in progress).
struct SeriesSnapshot {
  std::string name;  // Prometheus name, bpftrain_ prefix included, no _total suffix
  std::vector<std::pair<std::string, std::string>> labels;  // sorted by name
  SeriesKind kind{};
  uint64_t count = 0;       // samples in the window
  double sum = 0;           // sum of values in the window (counters: increments)
  double min = 0, max = 0;  // over the window (0 when count == 0)
  double last = 0;          // most recent value (gauges)
  double total = 0;         // counters and distributions: sum of everything since creation
  double rate = 0;          // count per second over the window (counters: sum per second)
  // quantile(q) for q in kExportedQuantiles, from the sketch (distributions only)
  std::vector<std::pair<double, double>> quantiles;
  // Distributions whose catalogue entry has bucket bounds (metrics::MetricDef::buckets): since
  // the series was created, the samples <= each bound (cumulative), then all of them (+Inf);
  // `total` is their sum. A Prometheus histogram, which sums across series; empty otherwise.
  std::span<const double> bucket_bounds;
  std::vector<uint64_t> bucket_counts;  // bucket_bounds.size() + 1 entries
  int64_t last_update_ns = 0;
};

inline constexpr double kExportedQuantiles[] = {0.5, 0.9, 0.99};

// One series' completed step, as a child collector forwards it to its parent (--upstream) and
// the parent merges it (mergeStep). Views are valid only during the call that hands them out.
struct StepSummary {
  std::string_view name;
  std::span<const std::pair<std::string, std::string>> labels;  // sorted by name
  SeriesKind kind{};
  uint64_t count = 0;
  double sum = 0, min = 0, max = 0, last = 0;
  const Sketch* sketch = nullptr;  // distributions only
};

class SeriesStore {
 public:
  static std::unique_ptr<SeriesStore> create(const WindowConfig& config);
  virtual ~SeriesStore() = default;

  // Finds or creates the series; labels need not be sorted. kRejectedSeries when the series
  // limit is reached or the labels exceed max_labels_per_series.
  virtual SeriesId lookup(std::string_view name, std::span<const Label> labels,
                          SeriesKind kind) = 0;
  // Adds one sample. `writer` in [0, config.writers). now_ns: CLOCK_MONOTONIC nanoseconds.
  virtual void record(int writer, SeriesId id, double value, int64_t now_ns) = 0;

  virtual std::vector<SeriesSnapshot> snapshot(int64_t now_ns) const = 0;
  // The same over a shorter window: the step in progress and the fewest completed steps before
  // it that cover `window` with it (SlidingWindow::stepsBefore). The controller reads ~1 s while
  // the exposition keeps the full window. A `window` at or above config().window is the full
  // window.
  virtual std::vector<SeriesSnapshot> snapshotWindow(int64_t now_ns,
                                                     std::chrono::nanoseconds window) const {
    (void)window;  // stores without windows (test doubles) have only one view
    return snapshot(now_ns);
  }
  // One series (the controller's features); empty optional-like result: count == 0 and name empty.
  virtual SeriesSnapshot snapshotOne(SeriesId id, int64_t now_ns) const = 0;

  virtual size_t seriesCount() const = 0;  // live series (expired ones no longer count)

  // ---- expiry (config.series_ttl). Called periodically (the collector: every step); scans at
  // most every ttl/8 and removes the series idle for ttl from the store and every snapshot.
  // Returns how many it removed. An expired series' id is not reused for a long while, but a
  // writer caching ids must look them up again when expiryEpoch() changes: a sample recorded
  // under an expired id is dropped. A lookup revives nothing: it creates the series anew.
  virtual size_t expireIdle(int64_t now_ns) {
    (void)now_ns;
    return 0;
  }
  // Overrides config.keep for one series: a writer that has stopped caching its id (a discovered
  // rank that exited) lets it expire; one that caches it again keeps it. No-op without expiry.
  virtual void setExpires(SeriesId id, bool expires) {
    (void)id;
    (void)expires;
  }
  virtual uint64_t expiryEpoch() const { return 0; }    // bumped by each expireIdle() that removed
  virtual uint64_t expiredSeries() const { return 0; }  // removed since creation
  virtual uint64_t rejectedSeries() const = 0;
  virtual size_t memoryBytes() const = 0;  // for the memory-per-series benchmark

  // ---- window hierarchy (--upstream) and health.
  virtual const WindowConfig& config() const = 0;
  // The step a monotonic time falls in: floor(now_ns / step).
  virtual int64_t stepOf(int64_t now_ns) const = 0;
  // Calls fn for every series with samples in `step` (shards merged), in id order; returns how
  // many. A step older than the window is gone and visits nothing.
  virtual size_t visitStep(int64_t step,
                           const std::function<void(const StepSummary&)>& fn) const = 0;
  // Merges a child's completed step into series `id` at the step of now_ns (counts and sums
  // added, sketches merged, counters' totals grow by the step's sum, gauges take its last value).
  virtual void mergeStep(int writer, SeriesId id, const StepSummary& step, int64_t now_ns) = 0;
  // Samples that arrived for a step already evicted from the ring (kept in totals, not windows).
  virtual uint64_t lateSamples() const = 0;
};

// CLOCK_MONOTONIC ns, the clock steps are counted in: common/clock.h's, under the window's name.
using ::bpftrain::monotonicNowNs;

// Our own metrics are looked up by their catalogue entry: name and kind come from one place.
inline SeriesId lookupMetric(SeriesStore& store, const metrics::MetricDef& metric,
                             std::span<const Label> labels) {
  return store.lookup(metric.name, labels, metric.kind);
}

// One sample of one of our own metrics, looked up each time (for events, not hot paths); a
// series the store refuses (label or series limits) is dropped, as the store counts it.
inline void recordMetric(SeriesStore& store, int writer, const metrics::MetricDef& metric,
                         std::initializer_list<Label> labels, double value, int64_t now_ns) {
  const SeriesId id =
      lookupMetric(store, metric, std::span<const Label>(labels.begin(), labels.size()));
  if (id != kRejectedSeries) store.record(writer, id, value, now_ns);
}

}  // namespace bpftrain::collector::window
