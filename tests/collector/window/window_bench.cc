// bpftrain_window_bench: memory per 10,000 series of each kind, ns per record() on the hot path
// (against the same work behind one global mutex, side by side), snapshot and step-visit time for
// 10,000 series, sketch size on the wire. Plain program; prints one table. Usage:
//   bpftrain_window_bench [--series N] [--records N] [--writers N] [--quick]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "collector/window/series_store.h"
#include "collector/window/sketch.h"
#include "collector/window/sliding_window.h"

namespace bpftrain::collector::window {
namespace {

constexpr int64_t kMs = 1'000'000;

struct Args {
  int series = 10'000;
  long records = 4'000'000;
  int writers = 2;
};

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

std::vector<SeriesId> makeSeries(SeriesStore& store, int n, SeriesKind kind) {
  std::vector<SeriesId> ids;
  ids.reserve(size_t(n));
  for (int i = 0; i < n; ++i) {
    std::string rank = std::to_string(i);
    Label labels[] = {{"job", "bench"}, {"rank", rank}};
    ids.push_back(store.lookup("bpftrain_bench_seconds", labels, kind));
  }
  return ids;
}

// Fills every step of the window: `per_step` samples per series per step, timing-like values.
void fillWindow(SeriesStore& store, const std::vector<SeriesId>& ids, int per_step, int64_t t0,
                int steps) {
  std::mt19937_64 rng(1);
  std::lognormal_distribution<> value(-4, 0.6);  // ~18 ms median, long right tail
  const int64_t step = store.config().step.count();
  for (int s = 0; s < steps; ++s)
    for (SeriesId id : ids)
      for (int k = 0; k < per_step; ++k) store.record(0, id, value(rng), t0 + s * step + k);
}

// The same window work behind one global mutex (the design record() avoids): one SlidingWindow
// per series, a total and a last value, all under a single lock.
struct GlobalMutexStore {
  std::mutex mutex;
  std::vector<SlidingWindow> windows;
  std::vector<double> totals, lasts;
  GlobalMutexStore(size_t n, const WindowSpec& spec)
      : windows(n, SlidingWindow(spec)), totals(n), lasts(n) {}
  void record(SeriesId id, double v, int64_t now) {
    std::lock_guard lock(mutex);
    windows[id].add(now, v);
    totals[id] += v;
    lasts[id] = v;
  }
};

// The floor: one mutex around a plain sum, no window, sketch or last value.
struct PlainSum {
  std::mutex mutex;
  std::vector<double> sums;
  void record(SeriesId id, double v) {
    std::lock_guard lock(mutex);
    sums[id] += v;
  }
};

template <typename F>
double nsPerOp(int threads, long ops_per_thread, F&& body) {
  std::vector<std::thread> pool;
  auto start = std::chrono::steady_clock::now();
  for (int t = 0; t < threads; ++t) pool.emplace_back([&, t] { body(t, ops_per_thread); });
  for (auto& th : pool) th.join();
  return seconds(std::chrono::steady_clock::now() - start) * 1e9 / double(ops_per_thread);
}

int run(const Args& args) {
  WindowConfig config;  // defaults: 5 s window, 500 ms step
  config.writers = args.writers;
  config.max_series = size_t(args.series) * 4;
  const int steps = int(config.window / config.step) + 1;
  const int64_t t0 = 1'000'000 * int64_t(1'000'000'000);
  const double per10k = 10'000.0 / args.series;

  std::printf(
      "bpftrain_window_bench: %d series, window %lld ms / step %lld ms, %d writers, %u cores\n",
      args.series, (long long)(config.window.count() / kMs), (long long)(config.step.count() / kMs),
      args.writers, std::thread::hardware_concurrency());
  std::printf("\n%-13s %14s %14s %14s %12s %12s\n", "memory", "created MiB", "window-full MiB",
              "bytes/series", "snapshot ms", "visitStep ms");
  for (SeriesKind kind : {SeriesKind::kCounter, SeriesKind::kGauge, SeriesKind::kDistribution}) {
    auto store = SeriesStore::create(config);
    const size_t empty = store->memoryBytes();
    auto ids = makeSeries(*store, args.series, kind);
    const size_t created = store->memoryBytes() - empty;
    fillWindow(*store, ids, kind == SeriesKind::kDistribution ? 20 : 1, t0, steps);
    const size_t full = store->memoryBytes() - empty;
    const int64_t now = t0 + (steps - 1) * config.step.count() + 1;
    std::vector<double> snap_ms, visit_ms;
    for (int i = 0; i < 5; ++i) {
      auto a = std::chrono::steady_clock::now();
      auto snap = store->snapshot(now);
      auto b = std::chrono::steady_clock::now();
      size_t visited = store->visitStep(store->stepOf(now) - 1, [](const StepSummary&) {});
      auto c = std::chrono::steady_clock::now();
      if (snap.size() != ids.size() || visited != ids.size()) {
        std::fprintf(stderr, "snapshot saw %zu series, visitStep %zu, expected %zu\n", snap.size(),
                     visited, ids.size());
        return 1;
      }
      snap_ms.push_back(seconds(b - a) * 1e3);
      visit_ms.push_back(seconds(c - b) * 1e3);
    }
    std::sort(snap_ms.begin(), snap_ms.end());
    std::sort(visit_ms.begin(), visit_ms.end());
    std::printf("%-13s %14.2f %14.2f %14.0f %12.2f %12.2f\n", metrics::kindName(kind).data(),
                double(created) * per10k / (1 << 20), double(full) * per10k / (1 << 20),
                double(full) / args.series, snap_ms[2] * per10k, visit_ms[2] * per10k);
  }
  std::printf(
      "(per 10,000 series; window-full: every step of the window holds samples, "
      "distributions 20 lognormal samples per step; snapshot/visitStep: median of 5)\n");

  std::printf("\n%-34s %10s %14s %8s %12s\n", "record() hot path", "ns/record", "global-mutex ns",
              "ratio", "plain-sum ns");
  for (SeriesKind kind : {SeriesKind::kCounter, SeriesKind::kDistribution}) {
    for (int threads : {1, args.writers}) {
      for (bool spread : {false, true}) {
        auto store = SeriesStore::create(config);
        auto ids = makeSeries(*store, args.series, kind);
        WindowSpec spec;
        spec.step_ns = config.step.count();
        spec.steps = steps - 1;
        spec.with_sketch = kind == SeriesKind::kDistribution;
        GlobalMutexStore global(ids.size(), spec);
        PlainSum plain;
        plain.sums.assign(ids.size(), 0);
        std::vector<double> values(4096);
        std::mt19937_64 rng(2);
        std::lognormal_distribution<> value(-4, 0.6);
        for (double& v : values) v = value(rng);
        const long ops = args.records / threads;
        // Warm: every series' sketches sized, so the timed loop is the steady state.
        fillWindow(*store, ids, 4, t0, steps);
        for (int st = 0; st < steps; ++st)
          for (SeriesId id : ids)
            for (int k = 0; k < 4; ++k)
              global.record(id, values[size_t(k + id) & 4095], t0 + st * config.step.count());
        const int64_t now = t0 + steps * config.step.count();
        auto series = [&](int t, long i) {
          // spread: round-robin over all series (cache-cold); else one series per thread.
          return spread ? ids[size_t((i * 7919 + t) % long(ids.size()))] : ids[size_t(t)];
        };
        double ours = nsPerOp(threads, ops, [&](int t, long n) {
          for (long i = 0; i < n; ++i)
            store->record(t, series(t, i), values[size_t(i) & 4095], now + i);
        });
        double mutex = nsPerOp(threads, ops, [&](int t, long n) {
          for (long i = 0; i < n; ++i)
            global.record(series(t, i), values[size_t(i) & 4095], now + i);
        });
        double floor = nsPerOp(threads, ops, [&](int t, long n) {
          for (long i = 0; i < n; ++i) plain.record(series(t, i), values[size_t(i) & 4095]);
        });
        char label[64];
        std::snprintf(label, sizeof label, "%s, %d thread%s, %s", metrics::kindName(kind).data(),
                      threads, threads > 1 ? "s" : "", spread ? "random series" : "one series");
        std::printf("%-34s %10.1f %14.1f %7.2fx %12.1f\n", label, ours, mutex, mutex / ours, floor);
      }
    }
  }
  std::printf(
      "(ns per record per thread, wall clock; ratio = global-mutex / ours: the same window and "
      "sketch work behind one global lock; plain-sum: one mutex around a sum, the floor)\n");

  Sketch sketch;
  std::mt19937_64 rng(3);
  std::lognormal_distribution<> value(-4, 0.6);
  std::vector<double> values(1 << 16);
  for (double& v : values) v = value(rng);
  auto a = std::chrono::steady_clock::now();
  for (int r = 0; r < 30; ++r)
    for (double v : values) sketch.add(v);
  double add_ns = seconds(std::chrono::steady_clock::now() - a) * 1e9 / (30.0 * values.size());
  Sketch small;
  for (int i = 0; i < 100; ++i) small.add(values[size_t(i)]);
  std::printf(
      "\nsketch: add %.1f ns; serialized %zu bytes for %zu bins (100 samples), %zu bytes "
      "for %zu bins (%zu samples)\n",
      add_ns, small.serializedSize(), small.binCount(), sketch.serializedSize(), sketch.binCount(),
      size_t(sketch.count()));
  return 0;
}

}  // namespace
}  // namespace bpftrain::collector::window

int main(int argc, char** argv) {
  bpftrain::collector::window::Args args;
  for (int i = 1; i < argc; ++i) {
    auto next = [&](const char* flag) {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", flag);
        std::exit(2);
      }
      return std::atol(argv[++i]);
    };
    if (!std::strcmp(argv[i], "--series")) {
      args.series = int(next("--series"));
    } else if (!std::strcmp(argv[i], "--records")) {
      args.records = next("--records");
    } else if (!std::strcmp(argv[i], "--writers")) {
      args.writers = int(next("--writers"));
    } else if (!std::strcmp(argv[i], "--quick")) {
      args.series = 1000;
      args.records = 200'000;
    } else {
      std::fprintf(stderr,
                   "usage: bpftrain_window_bench [--series N] [--records N] [--writers N] "
                   "[--quick]\n");
      return 2;
    }
  }
  if (args.series < args.writers || args.series < 1 || args.records < 1 || args.writers < 1) {
    std::fprintf(stderr, "need --series >= --writers >= 1 and --records >= 1\n");
    return 2;
  }
  return bpftrain::collector::window::run(args);
}
