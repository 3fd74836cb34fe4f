#include "collector/window/series_store.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <new>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/allocation_counter.h"

namespace bpftrain::collector::window {
namespace {

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;

WindowConfig smallConfig(int writers = 1, size_t max_series = 1000) {
  WindowConfig c;
  c.window = std::chrono::seconds(1);
  c.step = std::chrono::milliseconds(100);
  c.writers = writers;
  c.max_series = max_series;
  return c;
}

TEST(SeriesStore, LookupIgnoresLabelOrderAndBoundsCardinality) {
  auto store = SeriesStore::create(smallConfig(1, 3));
  Label ab[] = {{"a", "1"}, {"b", "2"}};
  Label ba[] = {{"b", "2"}, {"a", "1"}};
  SeriesId id = store->lookup("bpftrain_x", ab, SeriesKind::kCounter);
  ASSERT_NE(id, kRejectedSeries);
  EXPECT_EQ(store->lookup("bpftrain_x", ba, SeriesKind::kCounter), id);
  EXPECT_EQ(store->seriesCount(), 1u);
  // Same name and labels under another kind: refused and counted.
  EXPECT_EQ(store->lookup("bpftrain_x", ab, SeriesKind::kGauge), kRejectedSeries);
  EXPECT_EQ(store->rejectedSeries(), 1u);
  // Duplicate label names are refused.
  Label dup[] = {{"a", "1"}, {"a", "2"}};
  EXPECT_EQ(store->lookup("bpftrain_x", dup, SeriesKind::kCounter), kRejectedSeries);
  EXPECT_EQ(store->rejectedSeries(), 2u);
  // Name/label boundaries are part of the identity.
  Label s1[] = {{"ab", "c"}};
  Label s2[] = {{"a", "bc"}};
  SeriesId x = store->lookup("bpftrain_y", s1, SeriesKind::kGauge);
  SeriesId y = store->lookup("bpftrain_y", s2, SeriesKind::kGauge);
  EXPECT_NE(x, kRejectedSeries);
  EXPECT_NE(y, kRejectedSeries);
  EXPECT_NE(x, y);
  // The limit is 3 series.
  EXPECT_EQ(store->lookup("bpftrain_z", {}, SeriesKind::kGauge), kRejectedSeries);
  EXPECT_EQ(store->rejectedSeries(), 3u);
  EXPECT_EQ(store->seriesCount(), 3u);
  // Existing series are still found when full.
  EXPECT_EQ(store->lookup("bpftrain_x", ba, SeriesKind::kCounter), id);
}

TEST(SeriesStore, TooManyLabelsAreRejected) {
  WindowConfig c = smallConfig();
  c.max_labels_per_series = 2;
  auto store = SeriesStore::create(c);
  Label three[] = {{"a", "1"}, {"b", "2"}, {"c", "3"}};
  EXPECT_EQ(store->lookup("bpftrain_x", three, SeriesKind::kGauge), kRejectedSeries);
  EXPECT_EQ(store->rejectedSeries(), 1u);
  EXPECT_NE(store->lookup("bpftrain_x", std::span(three, 2), SeriesKind::kGauge), kRejectedSeries);
}

TEST(SeriesStore, SnapshotOfEachKind) {
  auto store = SeriesStore::create(smallConfig(2));
  Label rank[] = {{"rank", "0"}, {"job", "j"}};
  SeriesId c = store->lookup("bpftrain_bytes", rank, SeriesKind::kCounter);
  SeriesId g = store->lookup("bpftrain_loss", rank, SeriesKind::kGauge);
  SeriesId d = store->lookup("bpftrain_step_seconds", rank, SeriesKind::kDistribution);
  const int64_t t0 = 1000 * kSec;
  // 200 samples over 2 s on two writers.
  for (int i = 0; i < 200; ++i) {
    int64_t t = t0 + i * 10 * kMs;
    int w = i % 2;
    store->record(w, c, 3, t);
    store->record(w, g, i, t);
    store->record(w, d, (i % 100) + 1, t);
  }
  const int64_t now = t0 + 2 * kSec;  // the window holds steps 10..19 (t0+1 s .. t0+2 s)
  SeriesSnapshot sc = store->snapshotOne(c, now);
  EXPECT_EQ(sc.name, "bpftrain_bytes");
  ASSERT_EQ(sc.labels.size(), 2u);
  EXPECT_EQ(sc.labels[0].first, "job");
  EXPECT_EQ(sc.labels[1].first, "rank");
  EXPECT_EQ(sc.kind, SeriesKind::kCounter);
  EXPECT_EQ(sc.total, 600);
  EXPECT_EQ(sc.count, 100u);
  EXPECT_EQ(sc.sum, 300);
  EXPECT_NEAR(sc.rate, 300, 1e-9);  // 300 per second
  EXPECT_EQ(sc.last_update_ns, t0 + 199 * 10 * kMs);

  SeriesSnapshot sg = store->snapshotOne(g, now);
  EXPECT_EQ(sg.last, 199);
  EXPECT_EQ(sg.min, 100);
  EXPECT_EQ(sg.max, 199);
  EXPECT_EQ(sg.total, 0);
  EXPECT_NEAR(sg.rate, 100, 1e-9);

  SeriesSnapshot sd = store->snapshotOne(d, now);
  EXPECT_EQ(sd.count, 100u);
  EXPECT_EQ(sd.sum, 5050);
  ASSERT_EQ(sd.quantiles.size(), 3u);
  // Values 1..100: exact quantiles 50, 90, 99 (rank floor(q * 99) + 1).
  EXPECT_EQ(sd.quantiles[0].first, 0.5);
  EXPECT_NEAR(sd.quantiles[0].second, 50, 0.5);
  EXPECT_NEAR(sd.quantiles[1].second, 90, 0.9);
  EXPECT_NEAR(sd.quantiles[2].second, 99, 0.99);

  auto all = store->snapshot(now);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[2].name, "bpftrain_step_seconds");

  // Later, the window is empty: counters keep their total, quantiles become NaN.
  sc = store->snapshotOne(c, now + 10 * kSec);
  EXPECT_EQ(sc.count, 0u);
  EXPECT_EQ(sc.total, 600);
  EXPECT_EQ(sc.rate, 0);
  sd = store->snapshotOne(d, now + 10 * kSec);
  EXPECT_TRUE(std::isnan(sd.quantiles[0].second));
  EXPECT_EQ(store->snapshotOne(kRejectedSeries, now).name, "");
}

// The controller's looks between steps read a short window (--controller-react-window): once
// the step in progress has run that long it is read alone, without the whole older step that a
// reading of "the last step and the one in progress" carried (up to 1 s of samples for 500 ms):
// a link's figures turn that much sooner after a change.
TEST(SeriesStore, AShortWindowReadsTheStepInProgressAloneOnceItCoversIt) {
  WindowConfig config;
  config.window = std::chrono::seconds(5);
  config.step = std::chrono::milliseconds(500);
  auto store = SeriesStore::create(config);
  Label labels[] = {{"link", "other_host"}};
  SeriesId d = store->lookup("bpftrain_tcp_delivery_rate", labels, SeriesKind::kDistribution);
  SeriesId c = store->lookup("bpftrain_tcp_sends", labels, SeriesKind::kCounter);
  const int64_t t0 = 1000 * kSec;  // a step boundary
  // 100 before t0 + 500 ms (a whole step), 1 after: a change at the step boundary.
  for (int64_t t = t0; t < t0 + 800 * kMs; t += 10 * kMs) {
    store->record(0, d, t < t0 + 500 * kMs ? 100 : 1, t);
    store->record(0, c, 1, t);
  }
  auto read = [&](int64_t now, int64_t window_ms) {
    for (const SeriesSnapshot& s : store->snapshotWindow(now, std::chrono::milliseconds(window_ms)))
      if (s.kind == SeriesKind::kDistribution) return s;
    return SeriesSnapshot{};
  };
  auto rate = [&](int64_t now, int64_t window_ms) {
    for (const SeriesSnapshot& s : store->snapshotWindow(now, std::chrono::milliseconds(window_ms)))
      if (s.kind == SeriesKind::kCounter) return s.rate;
    return -1.0;
  };
  // 300 ms into the step after the change: 250 ms reads that step alone.
  const int64_t late = t0 + 800 * kMs;
  EXPECT_EQ(read(late, 250).count, 30u);
  EXPECT_NEAR(read(late, 250).quantiles[1].second, 1, 0.05);  // p90
  EXPECT_NEAR(rate(late, 250), 100, 1e-6);                    // 30 sends in 0.3 s
  // 500 ms does not fit in it: the step before too, and its p90 is the old figure.
  EXPECT_EQ(read(late, 500).count, 80u);
  EXPECT_NEAR(read(late, 500).quantiles[1].second, 100, 1);
  // 100 ms into the step (its bucket holds what was recorded for it), 250 ms takes the step
  // before as well.
  EXPECT_EQ(read(t0 + 600 * kMs, 250).count, 80u);
  EXPECT_NEAR(read(t0 + 600 * kMs, 250).quantiles[1].second, 100, 1);
}

TEST(SeriesStore, RecordIgnoresBadArgumentsAndCountsLateSamples) {
  auto store = SeriesStore::create(smallConfig(1));
  SeriesId id = store->lookup("bpftrain_x", {}, SeriesKind::kCounter);
  const int64_t t0 = 10 * kSec;
  store->record(0, id, 1, t0 + 5 * kSec);
  store->record(1, id, 1, t0);  // no such writer
  store->record(0, kRejectedSeries, 1, t0);
  store->record(0, id, std::nan(""), t0);
  store->record(0, id, 2, t0 + 5 * kSec - 1100 * kMs);  // older than the ring
  EXPECT_EQ(store->lateSamples(), 1u);
  SeriesSnapshot s = store->snapshotOne(id, t0 + 5 * kSec);
  EXPECT_EQ(s.count, 1u);
  EXPECT_EQ(s.total, 3);  // late samples still count in the total
}

// Several writers and concurrent snapshots, creating series as they go: exact totals at the end.
TEST(SeriesStore, ConcurrentWritersAndSnapshotsKeepExactTotals) {
  constexpr int kWriters = 4;
  constexpr int kSeries = 50;
  constexpr int kPerWriter = 50'000;
  WindowConfig config = smallConfig(kWriters);
  config.window = std::chrono::seconds(100);  // everything stays inside the window
  config.step = std::chrono::seconds(1);
  auto store = SeriesStore::create(config);
  const int64_t t0 = 5000 * kSec;

  std::atomic<bool> done{false};
  std::atomic<int> snapshots{0};
  std::atomic<bool> monotonic{true};
  std::thread reader([&] {
    double previous = 0;
    while (!done.load()) {
      double total = 0;
      for (const SeriesSnapshot& s : store->snapshot(t0 + kSec))
        if (s.kind == SeriesKind::kCounter) total += s.total;
      if (total < previous) monotonic = false;
      previous = total;
      snapshots.fetch_add(1);
    }
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      std::vector<SeriesId> ids;
      for (int s = 0; s < kSeries; ++s) {
        std::string value = std::to_string(s);
        Label l[] = {{"series", value}};
        ids.push_back(store->lookup("bpftrain_c", l, SeriesKind::kCounter));
        ids.push_back(store->lookup("bpftrain_d", l, SeriesKind::kDistribution));
      }
      for (int i = 0; i < kPerWriter; ++i) {
        SeriesId c = ids[size_t(2 * (i % kSeries))];
        SeriesId d = ids[size_t(2 * (i % kSeries) + 1)];
        store->record(w, c, 1, t0 + (i % 900) * kMs);
        store->record(w, d, double(i % 1000), t0 + (i % 900) * kMs);
      }
    });
  }
  for (auto& t : writers) t.join();
  done = true;
  reader.join();
  EXPECT_GT(snapshots.load(), 0);
  EXPECT_TRUE(monotonic.load());
  EXPECT_EQ(store->seriesCount(), size_t(2 * kSeries));
  uint64_t counter_total = 0, dist_count = 0;
  for (const SeriesSnapshot& s : store->snapshot(t0 + kSec)) {
    if (s.kind == SeriesKind::kCounter) {
      EXPECT_EQ(s.total, double(kWriters * kPerWriter / kSeries)) << s.labels[0].second;
      counter_total += uint64_t(s.total);
    } else {
      EXPECT_EQ(s.count, uint64_t(kWriters * kPerWriter / kSeries));
      dist_count += s.count;
    }
  }
  EXPECT_EQ(counter_total, uint64_t(kWriters * kPerWriter));
  EXPECT_EQ(dist_count, uint64_t(kWriters * kPerWriter));
}

TEST(SeriesStore, LookupOfExistingSeriesAndRecordAllocateNothingOnceSized) {
  if (!kCountsAllocations) GTEST_SKIP() << "allocations are not counted under TSan";
  auto store = SeriesStore::create(smallConfig(2));
  Label labels[] = {{"rank", "7"}, {"job", "j"}};
  SeriesId ids[] = {store->lookup("bpftrain_c", labels, SeriesKind::kCounter),
                    store->lookup("bpftrain_g", labels, SeriesKind::kGauge),
                    store->lookup("bpftrain_d", labels, SeriesKind::kDistribution),
                    // a catalogue distribution: its histogram buckets are counted too
                    lookupMetric(*store, metrics::kStepSeconds, labels)};
  std::vector<double> values;
  for (int i = 0; i < 100; ++i) values.push_back(0.001 * std::pow(1.05, i));
  auto fill = [&](int64_t from, int steps) {
    for (int s = 0; s < steps; ++s)
      for (double v : values)
        for (SeriesId id : ids) store->record(s % 2, id, v, from + s * 100 * kMs);
  };
  const int64_t t0 = 100 * kSec;
  fill(t0, 22);  // every ring slot of both writers has seen the value range
  g_allocations = 0;
  g_counting = true;
  long found = 0;
  for (int i = 0; i < 1000; ++i)
    found += store->lookup("bpftrain_d", labels, SeriesKind::kDistribution) == ids[2];
  fill(t0 + 22 * 100 * kMs, 60);  // six trips around the ring
  g_counting = false;
  EXPECT_EQ(found, 1000);
  EXPECT_EQ(g_allocations.load(), 0);
  double per_step = 0;
  for (double v : values) per_step += v;
  EXPECT_NEAR(store->snapshotOne(ids[0], t0 + 81 * 100 * kMs).total, 82 * per_step, 1e-9);
  EXPECT_EQ(store->snapshotOne(ids[2], t0 + 81 * 100 * kMs).count, 11u * 100);
}

TEST(SeriesStore, MemoryBytesGrowsWithSeriesAndSketches) {
  auto store = SeriesStore::create(smallConfig(1));
  const size_t empty = store->memoryBytes();
  std::vector<SeriesId> ids;
  for (int i = 0; i < 100; ++i) {
    std::string v = std::to_string(i);
    Label l[] = {{"rank", v}};
    ids.push_back(store->lookup("bpftrain_step_seconds", l, SeriesKind::kDistribution));
  }
  const size_t with_series = store->memoryBytes();
  EXPECT_GT(with_series, empty + 100 * sizeof(SeriesSnapshot));
  for (SeriesId id : ids)
    for (int i = 1; i <= 100; ++i) store->record(0, id, i * 0.001, 10 * kSec);
  const size_t with_samples = store->memoryBytes();
  // Each series sized at least one step's sketch bins (values 1 ms .. 100 ms: ~230 bins).
  EXPECT_GE(with_samples, with_series + 100 * 230 * sizeof(uint32_t));
  // Recording the same values again (a later step reusing nothing new) allocates nothing more
  // than the new step's sketch.
  for (SeriesId id : ids)
    for (int i = 1; i <= 100; ++i) store->record(0, id, i * 0.001, 10 * kSec);
  EXPECT_EQ(store->memoryBytes(), with_samples);
}

TEST(SeriesStore, VisitStepAndMergeStepCarryACompletedStepUpstream) {
  auto child = SeriesStore::create(smallConfig(2));
  auto parent = SeriesStore::create(smallConfig(1));
  Label l[] = {{"rank", "3"}};
  SeriesId d = child->lookup("bpftrain_step_seconds", l, SeriesKind::kDistribution);
  SeriesId c = child->lookup("bpftrain_bytes_total_src", l, SeriesKind::kCounter);
  const int64_t t0 = 77 * kSec;
  for (int i = 1; i <= 50; ++i) {
    child->record(i % 2, d, i, t0 + i * kMs);
    child->record(i % 2, c, 2, t0 + i * kMs);
  }
  const int64_t step = child->stepOf(t0);
  EXPECT_EQ(child->visitStep(step + 1, [](const StepSummary&) { FAIL(); }), 0u);
  size_t visited = child->visitStep(step, [&](const StepSummary& s) {
    EXPECT_EQ(s.labels.size(), 1u);
    if (s.kind == SeriesKind::kDistribution) {
      EXPECT_EQ(s.count, 50u);
      EXPECT_EQ(s.sum, 1275);
      EXPECT_EQ(s.min, 1);
      EXPECT_EQ(s.max, 50);
      EXPECT_EQ(s.last, 50);
      ASSERT_NE(s.sketch, nullptr);
      EXPECT_EQ(s.sketch->count(), 50u);
    } else {
      EXPECT_EQ(s.sum, 100);
      EXPECT_EQ(s.sketch, nullptr);
    }
    Label pl[] = {{s.labels[0].first, s.labels[0].second}};
    SeriesId id = parent->lookup(s.name, pl, s.kind);
    ASSERT_NE(id, kRejectedSeries);
    parent->mergeStep(0, id, s, 500 * kSec);
    parent->mergeStep(0, id, s, 500 * kSec);
  });
  EXPECT_EQ(visited, 2u);
  auto snap = parent->snapshot(500 * kSec);
  ASSERT_EQ(snap.size(), 2u);
  EXPECT_EQ(snap[0].count, 100u);
  EXPECT_EQ(snap[0].sum, 2550);
  EXPECT_NEAR(snap[0].quantiles[0].second, 25, 0.25);
  EXPECT_EQ(snap[1].total, 200);
}

// A catalogue distribution with bucket bounds also keeps a cumulative histogram: exact `le`
// counts since creation, merged over writers, surviving the window's eviction; a user's own
// distribution and a catalogue counter have none.
TEST(SeriesStore, CatalogueDistributionsKeepCumulativeHistograms) {
  auto store = SeriesStore::create(smallConfig(2));
  Label rank0[] = {{"job", "j"}, {"rank", "0"}};
  SeriesId step = lookupMetric(*store, metrics::kStepSeconds, rank0);
  SeriesId mine = store->lookup("my_timer", {}, SeriesKind::kDistribution);
  ASSERT_NE(step, kRejectedSeries);
  ASSERT_FALSE(metrics::kStepSeconds.buckets.empty());
  // 0.001 is a bound (le: counted in it); 0.0015 and 0.002 in le=0.002; 100 only in +Inf.
  store->record(0, step, 0.001, 1 * kSec);
  store->record(1, step, 0.0015, 1 * kSec);
  store->record(0, step, 0.002, 1 * kSec);
  store->record(1, step, 100, 1 * kSec);
  store->record(0, mine, 0.001, 1 * kSec);
  // 10 s later the window is empty, the histogram is not.
  SeriesSnapshot s = store->snapshotOne(step, 11 * kSec);
  EXPECT_EQ(s.count, 0u);
  ASSERT_EQ(s.bucket_bounds.size(), metrics::kStepSeconds.buckets.size());
  ASSERT_EQ(s.bucket_counts.size(), s.bucket_bounds.size() + 1);
  auto cumulativeAt = [&](double bound) {
    for (size_t i = 0; i < s.bucket_bounds.size(); ++i)
      if (s.bucket_bounds[i] == bound) return s.bucket_counts[i];
    ADD_FAILURE() << "no bound " << bound;
    return uint64_t{0};
  };
  EXPECT_EQ(cumulativeAt(5e-4), 0u);
  EXPECT_EQ(cumulativeAt(1e-3), 1u);
  EXPECT_EQ(cumulativeAt(2e-3), 3u);
  EXPECT_EQ(cumulativeAt(60), 3u);
  EXPECT_EQ(s.bucket_counts.back(), 4u);
  EXPECT_DOUBLE_EQ(s.total, 0.001 + 0.0015 + 0.002 + 100);
  EXPECT_TRUE(store->snapshotOne(mine, 11 * kSec).bucket_counts.empty());
}

// A parent merging a child's step files each sketch bin under its representative value.
TEST(SeriesStore, MergedStepsFillTheParentsHistogram) {
  auto child = SeriesStore::create(smallConfig());
  auto parent = SeriesStore::create(smallConfig());
  Label rank0[] = {{"job", "j"}, {"rank", "0"}};
  SeriesId c = lookupMetric(*child, metrics::kStepSeconds, rank0);
  for (int i = 0; i < 30; ++i) child->record(0, c, 0.003, 5 * kSec);  // le=0.005
  for (int i = 0; i < 10; ++i) child->record(0, c, 0.03, 5 * kSec);   // le=0.05
  SeriesId p = lookupMetric(*parent, metrics::kStepSeconds, rank0);
  child->visitStep(child->stepOf(5 * kSec),
                   [&](const StepSummary& s) { parent->mergeStep(0, p, s, 6 * kSec); });
  SeriesSnapshot s = parent->snapshotOne(p, 6 * kSec);
  ASSERT_FALSE(s.bucket_counts.empty());
  size_t le_2ms = 0, le_5ms = 0, le_50ms = 0;
  for (size_t i = 0; i < s.bucket_bounds.size(); ++i) {
    if (s.bucket_bounds[i] == 2e-3) le_2ms = i;
    if (s.bucket_bounds[i] == 5e-3) le_5ms = i;
    if (s.bucket_bounds[i] == 0.05) le_50ms = i;
  }
  EXPECT_EQ(s.bucket_counts[le_2ms], 0u);
  EXPECT_EQ(s.bucket_counts[le_5ms], 30u);
  EXPECT_EQ(s.bucket_counts[le_50ms], 40u);
  EXPECT_EQ(s.bucket_counts.back(), 40u);
  EXPECT_NEAR(s.total, 30 * 0.003 + 10 * 0.03, 1e-9);
}

// ---- expiry (--series-ttl)

WindowConfig ttlConfig(std::chrono::nanoseconds ttl, size_t max_series = 1000, int writers = 1) {
  WindowConfig c = smallConfig(writers, max_series);
  c.series_ttl = ttl;
  return c;
}

std::vector<std::string> jobsOf(const SeriesStore& store, int64_t now_ns) {
  std::vector<std::string> jobs;
  for (const SeriesSnapshot& s : store.snapshot(now_ns)) jobs.push_back(s.labels.at(0).second);
  std::sort(jobs.begin(), jobs.end());
  return jobs;
}

TEST(SeriesStoreExpiry, IdleSeriesLeaveTheStoreAndTheSnapshot) {
  auto store = SeriesStore::create(ttlConfig(std::chrono::seconds(2)));
  const int64_t t0 = 100 * kSec;
  Label a[] = {{"job", "a"}}, b[] = {{"job", "b"}};
  SeriesId ia = store->lookup("bpftrain_step", a, SeriesKind::kGauge);
  SeriesId ib = store->lookup("bpftrain_step", b, SeriesKind::kGauge);
  store->record(0, ia, 1, t0);
  store->record(0, ib, 1, t0);
  store->record(0, ia, 2, t0 + kSec);  // a keeps sending, b went away
  EXPECT_EQ(store->expireIdle(t0 + kSec), 0u);
  EXPECT_EQ(store->expiryEpoch(), 0u);
  EXPECT_EQ(store->expireIdle(t0 + 2500 * kMs), 1u);
  EXPECT_EQ(store->seriesCount(), 1u);
  EXPECT_EQ(store->expiredSeries(), 1u);
  EXPECT_EQ(store->expiryEpoch(), 1u);
  EXPECT_EQ(jobsOf(*store, t0 + 2500 * kMs), std::vector<std::string>{"a"});
  EXPECT_EQ(store->snapshotOne(ib, t0 + 2500 * kMs).name, "");
  // A sample under the expired id is dropped, not filed under another series.
  store->record(0, ib, 5, t0 + 2600 * kMs);
  EXPECT_EQ(store->seriesCount(), 1u);
  // b comes back: a new series, with a new id and nothing of the old one.
  SeriesId again = store->lookup("bpftrain_step", b, SeriesKind::kGauge);
  ASSERT_NE(again, kRejectedSeries);
  EXPECT_NE(again, ib);
  store->record(0, again, 7, t0 + 2700 * kMs);
  SeriesSnapshot snap = store->snapshotOne(again, t0 + 2700 * kMs);
  EXPECT_EQ(snap.count, 1u);
  EXPECT_EQ(snap.last, 7);
  EXPECT_EQ(jobsOf(*store, t0 + 2700 * kMs), (std::vector<std::string>{"a", "b"}));
}

TEST(SeriesStoreExpiry, ALookupKeepsASeriesAliveAndKeepAndZeroTtlNeverExpire) {
  WindowConfig config = ttlConfig(std::chrono::seconds(1));
  config.keep = [](std::string_view name) { return name == "bpftrain_kept"; };
  auto store = SeriesStore::create(config);
  const int64_t t0 = 100 * kSec;
  Label l[] = {{"job", "x"}};
  store->record(0, store->lookup("bpftrain_kept", l, SeriesKind::kCounter), 1, t0);
  store->record(0, store->lookup("bpftrain_looked_up", l, SeriesKind::kCounter), 1, t0);
  store->record(0, store->lookup("bpftrain_idle", l, SeriesKind::kCounter), 1, t0);
  EXPECT_EQ(store->expireIdle(t0), 0u);
  // Looked up (a writer about to record) after the scan at t0: not idle, though it has no sample.
  store->lookup("bpftrain_looked_up", l, SeriesKind::kCounter);
  EXPECT_EQ(store->expireIdle(t0 + 1500 * kMs), 1u);  // bpftrain_idle only
  std::vector<std::string> names;
  for (const SeriesSnapshot& s : store->snapshot(t0 + 1500 * kMs)) names.push_back(s.name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"bpftrain_kept", "bpftrain_looked_up"}));
  EXPECT_EQ(store->expireIdle(t0 + 60 * kSec), 1u);  // the looked-up one, idle since
  EXPECT_EQ(store->seriesCount(), 1u);

  auto forever = SeriesStore::create(smallConfig());
  forever->record(0, forever->lookup("bpftrain_idle", l, SeriesKind::kCounter), 1, t0);
  EXPECT_EQ(forever->expireIdle(t0 + 3600 * kSec), 0u);
  EXPECT_EQ(forever->seriesCount(), 1u);
}

// Thousands of short jobs, each a few series for a moment: with a TTL the store holds only the
// recent ones, never reaches its limit and its memory stays flat.
TEST(SeriesStoreExpiry, ShortJobsComingAndGoingKeepTheSeriesCountAndMemoryFlat) {
  constexpr int kJobs = 5000, kSeriesPerJob = 5;
  constexpr size_t kLimit = 1000;  // far below the 25000 series the jobs create in all
  auto store = SeriesStore::create(ttlConfig(std::chrono::seconds(2), kLimit, 2));
  const char* names[kSeriesPerJob] = {"bpftrain_step_seconds", "bpftrain_loss", "bpftrain_step",
                                      "bpftrain_allreduce_bytes", "bpftrain_samples_per_second"};
  const SeriesKind kinds[kSeriesPerJob] = {SeriesKind::kDistribution, SeriesKind::kGauge,
                                           SeriesKind::kGauge, SeriesKind::kCounter,
                                           SeriesKind::kGauge};
  int64_t now = 100 * kSec;
  size_t most = 0, memory_at_1000 = 0, memory_most = 0;
  for (int job = 0; job < kJobs; ++job, now += 100 * kMs) {  // a new job every 100 ms
    std::string name = "job-" + std::to_string(job);
    Label labels[] = {{"job", name}, {"rank", "0"}};
    for (int i = 0; i < kSeriesPerJob; ++i) {
      SeriesId id = store->lookup(names[i], labels, kinds[i]);
      ASSERT_NE(id, kRejectedSeries) << "job " << job;
      for (int k = 0; k < 10; ++k) store->record(job % 2, id, 0.01 * (k + 1), now);
    }
    store->expireIdle(now);
    most = std::max(most, store->seriesCount());
    if (job == 1000) memory_at_1000 = store->memoryBytes();
    if (job > 1000) memory_most = std::max(memory_most, store->memoryBytes());
  }
  // Live: the jobs of the last TTL plus at most one scan interval (ttl/8): 2.25 s of jobs.
  EXPECT_LE(most, size_t(23 * kSeriesPerJob));
  EXPECT_EQ(store->rejectedSeries(), 0u);
  EXPECT_GE(store->expiredSeries(), uint64_t((kJobs - 23) * kSeriesPerJob));
  EXPECT_EQ(store->expiredSeries() + store->seriesCount(), uint64_t(kJobs * kSeriesPerJob));
  EXPECT_LE(memory_most, memory_at_1000 + memory_at_1000 / 10);
  store->expireIdle(now + 10 * kSec);
  store->expireIdle(now + 20 * kSec);
  EXPECT_EQ(store->seriesCount(), 0u);
  EXPECT_TRUE(store->snapshot(now + 20 * kSec).empty());
}

// Writers record through cached ids and look up new series while the expiry scan removes idle
// ones and readers take snapshots (run under TSan by tools/test --sanitize thread).
TEST(SeriesStoreExpiry, ConcurrentWritersReadersAndExpiry) {
  constexpr int kWriters = 3;
  auto store = SeriesStore::create(ttlConfig(std::chrono::milliseconds(200), 2000, kWriters));
  std::atomic<int64_t> now{100 * kSec};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      for (const SeriesSnapshot& s : store->snapshot(now.load())) EXPECT_FALSE(s.name.empty());
      store->memoryBytes();
    }
  });
  std::thread expirer([&] {
    while (!done.load()) store->expireIdle(now.load());
  });
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      uint64_t epoch = store->expiryEpoch();
      std::vector<SeriesId> ids;
      for (int round = 0; round < 300; ++round) {
        if (uint64_t e = store->expiryEpoch(); e != epoch) {
          epoch = e;
          ids.clear();  // what the contract asks of a writer that caches ids
        }
        std::string job = std::to_string(w) + "-" + std::to_string(round / 20);
        Label l[] = {{"job", job}};
        if (ids.empty()) ids.push_back(store->lookup("bpftrain_c", l, SeriesKind::kCounter));
        for (SeriesId id : ids) store->record(w, id, 1, now.load());
        if (w == 0) now.fetch_add(10 * kMs);
        if (round % 20 == 19) ids.clear();  // this writer's job ends
      }
    });
  }
  for (auto& t : writers) t.join();
  // Every job has ended: as time goes on the expirer removes them all (deadline, not a sleep).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (store->seriesCount() > 0 && std::chrono::steady_clock::now() < deadline) {
    now.fetch_add(50 * kMs);
    std::this_thread::yield();
  }
  done = true;
  reader.join();
  expirer.join();
  EXPECT_EQ(store->seriesCount(), 0u);
  EXPECT_GE(store->expiredSeries(), uint64_t(kWriters * 300 / 20));
}

}  // namespace
}  // namespace bpftrain::collector::window
