#include "collector/window/series_store.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <limits>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>

#include "collector/window/sliding_window.h"

namespace bpftrain::collector::window {
namespace {

// Labels are sorted on the stack, so a lookup of an existing series allocates nothing.
inline constexpr size_t kMaxLabelsHardLimit = 64;

// Each (series, writer) shard has exactly one writing thread; the lock is only ever contended
// by a snapshot reader merging that shard, which holds it for microseconds.
class SpinLock {
 public:
  void lock() {
    int spins = 0;
    while (flag_.exchange(true, std::memory_order_acquire)) {
      while (flag_.load(std::memory_order_relaxed)) {
        if (++spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
          __builtin_ia32_pause();
#endif
        } else {
          std::this_thread::yield();
        }
      }
    }
  }
  void unlock() { flag_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> flag_{false};
};

// Cache-line aligned so two writers never share a line. The series' kind is copied here so
// record() reaches everything it needs through the shard alone.
struct alignas(64) Shard {
  SpinLock lock;
  SeriesKind kind{};
  SlidingWindow window;
  double total = 0;  // counters: every increment since creation; distributions: every value
  double last = 0;
  int64_t last_ns = std::numeric_limits<int64_t>::min();
  // Histogram of a catalogue distribution with bucket bounds: samples per bucket since creation
  // (not cumulative; bounds.size() + 1 entries, the last for +Inf). Null otherwise.
  std::span<const double> bounds;
  std::unique_ptr<uint64_t[]> buckets;

  void countBucket(double v, uint64_t n) {
    // Prometheus buckets are `le`: the first bound >= v.
    buckets[size_t(std::lower_bound(bounds.begin(), bounds.end(), v) - bounds.begin())] += n;
  }
};

// The histogram bounds of a series: its catalogue entry's, for a distribution of that name.
std::span<const double> bucketBoundsOf(std::string_view name, SeriesKind kind) {
  if (kind != SeriesKind::kDistribution) return {};
  const metrics::MetricDef* def = metrics::find(name);
  return def && def->kind == kind ? def->buckets : std::span<const double>{};
}

struct Series {
  std::string name;
  std::vector<std::pair<std::string, std::string>> labels;  // sorted by name
  SeriesKind kind{};
  uint64_t hash = 0;
  SeriesId next = kRejectedSeries;  // next series with the same hash
  std::unique_ptr<Shard[]> shards;  // one per writer
  std::span<const double> bounds;   // histogram bucket bounds (catalogue), empty: none
  // Expiry (--series-ttl): a lookup of an existing series sets `touched`; the expiry scan turns
  // it into active_ns, so a series looked up (about to be written) is not expired under its
  // writer's feet. Samples count through the shards' last_ns.
  std::atomic<bool> touched{false};
  int64_t active_ns = std::numeric_limits<int64_t>::min();  // the expiry scan's only
  std::atomic<bool> expires{true};  // config.keep said no otherwise, or setExpires()
};

uint64_t fnv1a(uint64_t h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= 0xff;  // separator, so ("ab","c") and ("a","bc") differ
  h *= 0x100000001b3ULL;
  return h;
}

size_t heapBytes(const std::string& s) {
  return s.capacity() > std::string().capacity() ? s.capacity() + 1 : 0;
}

class ShardedSeriesStore final : public SeriesStore {
 public:
  explicit ShardedSeriesStore(const WindowConfig& config)
      : config_(config),
        writers_(std::max(config.writers, 1)),
        max_series_(std::min<size_t>(config.max_series, kRejectedSeries - 2)),
        max_labels_(std::min(config.max_labels_per_series, kMaxLabelsHardLimit)),
        // With expiry, ids of expired series are not handed out again until the allocation
        // cursor wraps around an id space four times the series limit, so that an id a writer
        // still holds from before an expiry never names another series (see expiryEpoch()).
        id_space_(config.series_ttl.count() > 0
                      ? std::min<size_t>(max_series_ * 4, kRejectedSeries - 2)
                      : max_series_),
        slots_(std::make_unique<std::atomic<Series*>[]>(id_space_)),
        shard_slots_(std::make_unique<std::atomic<Shard*>[]>(id_space_)),
        owned_(id_space_) {
    config_.writers = writers_;
    const int64_t step = std::max<int64_t>(config.step.count(), 1);
    const int64_t window = std::max<int64_t>(config.window.count(), step);
    spec_.step_ns = step;
    spec_.steps = int((window + step - 1) / step);
    spec_.relative_error = config.relative_error;
    spec_.with_sketch = false;
    sketch_spec_ = spec_;
    sketch_spec_.with_sketch = true;
  }

  SeriesId lookup(std::string_view name, std::span<const Label> labels, SeriesKind kind) override {
    if (labels.size() > max_labels_) return reject();
    std::array<const Label*, kMaxLabelsHardLimit> sorted;
    for (size_t i = 0; i < labels.size(); ++i) sorted[i] = &labels[i];
    std::sort(sorted.begin(), sorted.begin() + labels.size(),
              [](const Label* a, const Label* b) { return a->name < b->name; });
    uint64_t h = fnv1a(0xcbf29ce484222325ULL, name);
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0 && sorted[i]->name == sorted[i - 1]->name) return reject();  // duplicate label
      h = fnv1a(fnv1a(h, sorted[i]->name), sorted[i]->value);
    }
    std::span<const Label* const> key(sorted.data(), labels.size());
    {
      std::shared_lock lock(index_mutex_);
      if (SeriesId id = findLocked(h, name, key); id != kRejectedSeries) return checkKind(id, kind);
    }
    std::unique_lock lock(index_mutex_);
    if (SeriesId id = findLocked(h, name, key); id != kRejectedSeries) return checkKind(id, kind);
    if (live_.load(std::memory_order_relaxed) >= max_series_) return reject();
    const uint32_t id = freeIdLocked();
    if (id == kRejectedSeries) return reject();  // every id live or retiring: limit reached

    auto series = std::make_unique<Series>();
    series->name = std::string(name);
    series->labels.reserve(key.size());
    for (const Label* l : key) series->labels.emplace_back(l->name, l->value);
    series->kind = kind;
    series->hash = h;
    series->shards = std::make_unique<Shard[]>(size_t(writers_));
    series->bounds = bucketBoundsOf(name, kind);
    series->expires = !config_.keep || !config_.keep(series->name);
    for (int w = 0; w < writers_; ++w) {
      Shard& shard = series->shards[w];
      shard.kind = kind;
      shard.window = SlidingWindow(kind == SeriesKind::kDistribution ? sketch_spec_ : spec_);
      if (!series->bounds.empty()) {
        shard.bounds = series->bounds;
        shard.buckets = std::make_unique<uint64_t[]>(series->bounds.size() + 1);
      }
    }
    auto [it, inserted] = index_.try_emplace(h, id);
    if (!inserted) {
      series->next = it->second;
      it->second = id;
    }
    slots_[id].store(series.get(), std::memory_order_release);
    shard_slots_[id].store(series->shards.get(), std::memory_order_release);
    owned_[id] = std::move(series);
    live_.fetch_add(1, std::memory_order_relaxed);
    if (id >= high_water_.load(std::memory_order_relaxed))
      high_water_.store(id + 1, std::memory_order_release);
    return id;
  }

  void record(int writer, SeriesId id, double value, int64_t now_ns) override {
    if (id >= id_space_ || writer < 0 || writer >= writers_ || !std::isfinite(value)) return;
    Shard* shards = shard_slots_[id].load(std::memory_order_acquire);
    if (!shards) return;
    Shard& shard = shards[writer];
    shard.lock.lock();
    const bool windowed = shard.window.add(now_ns, value);
    if (shard.kind != SeriesKind::kGauge) shard.total += value;
    if (shard.buckets) shard.countBucket(value, 1);
    if (now_ns >= shard.last_ns) {
      shard.last = value;
      shard.last_ns = now_ns;
    }
    shard.lock.unlock();
    if (!windowed) late_.fetch_add(1, std::memory_order_relaxed);
  }

  std::vector<SeriesSnapshot> snapshot(int64_t now_ns) const override {
    return snapshotWindow(now_ns, config_.window);
  }

  std::vector<SeriesSnapshot> snapshotWindow(int64_t now_ns,
                                             std::chrono::nanoseconds window) const override {
    const int steps = SlidingWindow::stepsBefore(now_ns, window.count(), config_.step.count());
    std::shared_lock retire(retire_mutex_);
    const uint32_t n = high_water_.load(std::memory_order_acquire);
    std::vector<SeriesSnapshot> out;
    out.reserve(live_.load(std::memory_order_relaxed));
    Sketch scratch(config_.relative_error);
    for (uint32_t id = 0; id < n; ++id)
      if (const Series* s = seriesAt(id)) out.push_back(snapshotOf(*s, now_ns, scratch, steps));
    return out;
  }

  SeriesSnapshot snapshotOne(SeriesId id, int64_t now_ns) const override {
    std::shared_lock retire(retire_mutex_);
    const Series* s = seriesAt(id);
    if (!s) return SeriesSnapshot{};
    Sketch scratch(config_.relative_error);
    return snapshotOf(*s, now_ns, scratch);
  }

  size_t seriesCount() const override { return live_.load(std::memory_order_relaxed); }
  uint64_t expiredSeries() const override { return expired_.load(std::memory_order_relaxed); }
  uint64_t expiryEpoch() const override { return epoch_.load(std::memory_order_acquire); }

  void setExpires(SeriesId id, bool expires) override {
    if (id >= id_space_) return;
    std::shared_lock retire(retire_mutex_);
    if (Series* s = seriesAt(id)) s->expires.store(expires, std::memory_order_relaxed);
  }

  size_t expireIdle(int64_t now_ns) override {
    const int64_t ttl = config_.series_ttl.count();
    if (ttl <= 0) return 0;
    std::lock_guard scan_lock(expire_mutex_);
    if (now_ns < next_scan_ns_) return 0;
    // A scan every eighth of the TTL (at least a step): a series leaves within ttl * 9/8.
    next_scan_ns_ = now_ns + std::max<int64_t>(ttl / 8, config_.step.count());
    {
      // What the previous scan retired is freed now: readers hold the retire lock while they use
      // a series, and a writer that loaded an id before that scan has long finished its record().
      std::unique_lock retire(retire_mutex_);
      std::unique_lock lock(index_mutex_);
      for (SeriesId id : retiring_ids_) state_[id] = kFree;
      retiring_ids_.clear();
      retired_.clear();
    }
    std::vector<SeriesId> idle;
    const uint32_t n = high_water_.load(std::memory_order_acquire);
    for (uint32_t id = 0; id < n; ++id) {
      Series* s = seriesAt(id);
      if (!s || !s->expires.load(std::memory_order_relaxed)) continue;
      if (s->touched.exchange(false, std::memory_order_acq_rel)) s->active_ns = now_ns;
      int64_t last = s->active_ns;
      for (int w = 0; w < writers_; ++w) {
        Shard& shard = s->shards[size_t(w)];
        shard.lock.lock();
        last = std::max(last, shard.last_ns);
        shard.lock.unlock();
      }
      if (last == std::numeric_limits<int64_t>::min()) {
        s->active_ns = now_ns;  // created since the last scan, never written: its TTL starts now
        continue;
      }
      if (now_ns - last >= ttl) idle.push_back(id);
    }
    if (idle.empty()) return 0;
    std::unique_lock lock(index_mutex_);
    size_t expired = 0;
    for (SeriesId id : idle) {
      Series* s = seriesAt(id);
      // Looked up since the scan above: about to be written, so it stays.
      if (!s || s->touched.load(std::memory_order_acquire)) continue;
      unlinkLocked(id, *s);
      slots_[id].store(nullptr, std::memory_order_release);
      shard_slots_[id].store(nullptr, std::memory_order_release);
      state_[id] = kRetiring;
      retiring_ids_.push_back(id);
      retired_.push_back(std::move(owned_[id]));
      ++expired;
    }
    live_.fetch_sub(expired, std::memory_order_relaxed);
    expired_.fetch_add(expired, std::memory_order_relaxed);
    if (expired) epoch_.fetch_add(1, std::memory_order_acq_rel);
    return expired;
  }
  uint64_t rejectedSeries() const override { return rejected_.load(std::memory_order_relaxed); }
  uint64_t lateSamples() const override { return late_.load(std::memory_order_relaxed); }

  size_t memoryBytes() const override {
    std::shared_lock lock(index_mutex_);
    size_t bytes = sizeof(*this) +
                   id_space_ * (sizeof(std::atomic<Series*>) + sizeof(std::atomic<Shard*>)) +
                   owned_.capacity() * sizeof(std::unique_ptr<Series>) + state_.capacity();
    // unordered_map: the bucket array plus one node (next pointer + value; libstdc++ caches no
    // hash for integer keys) each.
    bytes += index_.bucket_count() * sizeof(void*) +
             index_.size() * (sizeof(void*) + sizeof(std::pair<const uint64_t, SeriesId>));
    for (const auto& s : owned_) {
      if (!s) continue;
      bytes += sizeof(Series) + heapBytes(s->name);
      bytes += s->labels.capacity() * sizeof(s->labels[0]);
      for (const auto& [k, v] : s->labels) bytes += heapBytes(k) + heapBytes(v);
      // new Shard[n] of an over-aligned type with a destructor stores its element count in a
      // cookie padded to the alignment.
      bytes += size_t(writers_) * sizeof(Shard) + alignof(Shard);
      if (!s->bounds.empty()) bytes += size_t(writers_) * (s->bounds.size() + 1) * sizeof(uint64_t);
      for (int w = 0; w < writers_; ++w) {
        Shard& shard = s->shards[size_t(w)];
        shard.lock.lock();
        bytes += shard.window.memoryBytes();
        shard.lock.unlock();
      }
    }
    return bytes;
  }

  const WindowConfig& config() const override { return config_; }
  int64_t stepOf(int64_t now_ns) const override {
    return SlidingWindow::floorDiv(now_ns, spec_.step_ns);
  }

  size_t visitStep(int64_t step, const std::function<void(const StepSummary&)>& fn) const override {
    std::shared_lock retire(retire_mutex_);
    const uint32_t n = high_water_.load(std::memory_order_acquire);
    Sketch scratch(config_.relative_error);
    size_t visited = 0;
    for (uint32_t id = 0; id < n; ++id) {
      if (!seriesAt(id)) continue;
      const Series& s = *seriesAt(id);
      const bool dist = s.kind == SeriesKind::kDistribution;
      StepAggregate agg;
      scratch.clear();
      bool any = false;
      for (int w = 0; w < writers_; ++w) {
        Shard& shard = s.shards[size_t(w)];
        shard.lock.lock();
        any |= shard.window.collectStep(step, agg, dist ? &scratch : nullptr);
        shard.lock.unlock();
      }
      if (!any) continue;
      StepSummary summary{s.name,    s.labels, s.kind,
                          agg.count, agg.sum,  agg.min,
                          agg.max,   agg.last, dist ? &scratch : nullptr};
      fn(summary);
      ++visited;
    }
    return visited;
  }

  void mergeStep(int writer, SeriesId id, const StepSummary& step, int64_t now_ns) override {
    Series* s = seriesAt(id);
    if (!s || writer < 0 || writer >= writers_ || step.count == 0) return;
    Shard& shard = s->shards[size_t(writer)];
    StepAggregate agg{step.count, step.sum, step.min, step.max, step.last, now_ns};
    shard.lock.lock();
    const bool windowed = shard.window.mergeAt(now_ns, agg, step.sketch);
    if (s->kind != SeriesKind::kGauge) shard.total += step.sum;
    if (shard.buckets) {
      // A child's step arrives as a sketch: each bin goes to the bucket of its representative
      // value, so a sample within the relative error of a bound may land in the neighbouring one.
      uint64_t binned = 0;
      if (step.sketch)
        step.sketch->forEachBin([&](double v, uint64_t n) {
          shard.countBucket(v, n);
          binned += n;
        });
      if (binned < step.count) shard.buckets[shard.bounds.size()] += step.count - binned;
    }
    if (now_ns >= shard.last_ns) {
      shard.last = step.last;
      shard.last_ns = now_ns;
    }
    shard.lock.unlock();
    if (!windowed) late_.fetch_add(step.count, std::memory_order_relaxed);
  }

 private:
  SeriesId reject() {
    rejected_.fetch_add(1, std::memory_order_relaxed);
    return kRejectedSeries;
  }

  // A name and label set already bound to another kind is refused (Prometheus would reject the
  // exposition) and counted with the rejected series.
  SeriesId checkKind(SeriesId id, SeriesKind kind) {
    Series* s = seriesAt(id);
    if (!s) return reject();  // not reached: findLocked returns live ids
    s->touched.store(true, std::memory_order_release);
    return s->kind == kind ? id : reject();
  }

  SeriesId findLocked(uint64_t h, std::string_view name, std::span<const Label* const> key) const {
    auto it = index_.find(h);
    if (it == index_.end()) return kRejectedSeries;
    for (SeriesId id = it->second; id != kRejectedSeries; id = seriesAt(id)->next) {
      const Series& s = *seriesAt(id);
      if (s.name != name || s.labels.size() != key.size()) continue;
      bool same = true;
      for (size_t i = 0; i < key.size() && same; ++i)
        same = s.labels[i].first == key[i]->name && s.labels[i].second == key[i]->value;
      if (same) return id;
    }
    return kRejectedSeries;
  }

  // The next id neither live nor retiring, from the allocation cursor on (index lock held).
  SeriesId freeIdLocked() {
    for (size_t tried = 0; tried < id_space_; ++tried) {
      const uint32_t id = next_id_;
      next_id_ = next_id_ + 1 == id_space_ ? 0 : next_id_ + 1;
      if (state_[id] == kFree) {
        state_[id] = kLive;
        return id;
      }
    }
    return kRejectedSeries;
  }

  // Takes an expired series out of its hash chain (index lock held).
  void unlinkLocked(SeriesId id, const Series& s) {
    auto it = index_.find(s.hash);
    if (it == index_.end()) return;
    if (it->second == id) {
      if (s.next == kRejectedSeries)
        index_.erase(it);
      else
        it->second = s.next;
      return;
    }
    for (SeriesId prev = it->second; prev != kRejectedSeries;) {
      Series* p = seriesAt(prev);
      if (p->next == id) {
        p->next = s.next;
        return;
      }
      prev = p->next;
    }
  }

  Series* seriesAt(SeriesId id) const {
    if (id >= id_space_) return nullptr;
    return slots_[id].load(std::memory_order_acquire);
  }

  SeriesSnapshot snapshotOf(const Series& s, int64_t now_ns, Sketch& scratch,
                            int steps = -1) const {
    SeriesSnapshot snap;
    snap.name = s.name;
    snap.labels = s.labels;
    snap.kind = s.kind;
    const bool dist = s.kind == SeriesKind::kDistribution;
    StepAggregate agg;
    scratch.clear();
    double total = 0, last = 0;
    int64_t last_ns = std::numeric_limits<int64_t>::min();
    int64_t first_step = std::numeric_limits<int64_t>::max();
    if (!s.bounds.empty()) {
      snap.bucket_bounds = s.bounds;
      snap.bucket_counts.assign(s.bounds.size() + 1, 0);
    }
    for (int w = 0; w < writers_; ++w) {
      Shard& shard = s.shards[size_t(w)];
      shard.lock.lock();
      shard.window.collect(now_ns, agg, dist ? &scratch : nullptr, steps);
      total += shard.total;
      if (shard.buckets)
        for (size_t b = 0; b < snap.bucket_counts.size(); ++b)
          snap.bucket_counts[b] += shard.buckets[b];
      if (shard.last_ns > last_ns) {
        last = shard.last;
        last_ns = shard.last_ns;
      }
      first_step = std::min(first_step, shard.window.firstStep());
      shard.lock.unlock();
    }
    snap.count = agg.count;
    snap.sum = agg.sum;
    snap.min = agg.count ? agg.min : 0;
    snap.max = agg.count ? agg.max : 0;
    snap.last = last;
    snap.last_update_ns = last_ns == std::numeric_limits<int64_t>::min() ? 0 : last_ns;
    if (s.kind != SeriesKind::kGauge) snap.total = total;
    for (size_t b = 1; b < snap.bucket_counts.size(); ++b)
      snap.bucket_counts[b] += snap.bucket_counts[b - 1];
    if (first_step != std::numeric_limits<int64_t>::max()) {
      const double amount = s.kind == SeriesKind::kCounter ? agg.sum : double(agg.count);
      snap.rate = s.shards[0].window.rate(amount, now_ns, first_step, steps);
    }
    if (dist) {
      snap.quantiles.reserve(std::size(kExportedQuantiles));
      for (double q : kExportedQuantiles) {
        // Clamped to the exact window min/max: tighter than the sketch alone, same guarantee.
        double v = agg.count ? std::clamp(scratch.quantile(q), agg.min, agg.max)
                             : std::numeric_limits<double>::quiet_NaN();
        snap.quantiles.emplace_back(q, v);
      }
    }
    return snap;
  }

  WindowConfig config_;
  int writers_;
  size_t max_series_;
  size_t max_labels_;
  WindowSpec spec_, sketch_spec_;
  size_t id_space_;  // max_series_, or four times it with expiry
  std::unique_ptr<std::atomic<Series*>[]> slots_;
  std::unique_ptr<std::atomic<Shard*>[]> shard_slots_;  // record()'s path: id -> shards
  std::atomic<uint32_t> high_water_{0};                 // ids below it may be live
  std::atomic<size_t> live_{0};
  mutable std::shared_mutex index_mutex_;
  std::unordered_map<uint64_t, SeriesId> index_;
  std::vector<std::unique_ptr<Series>> owned_;  // by id
  enum : uint8_t { kFree, kLive, kRetiring };
  std::vector<uint8_t> state_ = std::vector<uint8_t>(id_space_, kFree);  // index lock
  uint32_t next_id_ = 0;                                                 // index lock
  // Expiry: one scan at a time; series retired by one scan are freed by the next.
  std::mutex expire_mutex_;
  int64_t next_scan_ns_ = std::numeric_limits<int64_t>::min();
  mutable std::shared_mutex retire_mutex_;
  std::vector<std::unique_ptr<Series>> retired_;
  std::vector<SeriesId> retiring_ids_;
  std::atomic<uint64_t> expired_{0};
  std::atomic<uint64_t> epoch_{0};
  std::atomic<uint64_t> rejected_{0};
  std::atomic<uint64_t> late_{0};
};

}  // namespace

std::unique_ptr<SeriesStore> SeriesStore::create(const WindowConfig& config) {
  return std::make_unique<ShardedSeriesStore>(config);
}

}  // namespace bpftrain::collector::window
