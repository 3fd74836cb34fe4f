// A SeriesStore test double that keeps every sample exactly (no windows, no sketch), so ingest
// tests can compare what was sent with what was recorded, value by value.
#pragma once

#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "collector/window/series_store.h"
#include "tests/collector/window/unwindowed_store.h"

namespace bpftrain::collector::ingest::testing {

struct FakeSeries {
  std::string key;  // name{l1=v1,l2=v2} with labels sorted
  window::SeriesKind kind{};
  std::vector<double> values;
  double sum() const {
    double s = 0;
    for (double v : values) s += v;
    return s;
  }
};

class FakeStore : public window::testing::UnwindowedStore {
 public:
  explicit FakeStore(size_t max_series = 1'000'000) : max_series_(max_series) {}

  static std::string keyOf(std::string_view name, std::span<const window::Label> labels) {
    std::vector<std::pair<std::string, std::string>> l;
    for (const auto& x : labels) l.emplace_back(x.name, x.value);
    std::sort(l.begin(), l.end());
    std::string key(name);
    key += '{';
    for (size_t i = 0; i < l.size(); ++i) key += (i ? "," : "") + l[i].first + "=" + l[i].second;
    return key + '}';
  }

  window::SeriesId lookup(std::string_view name, std::span<const window::Label> labels,
                          window::SeriesKind kind) override {
    std::lock_guard lock(mu_);
    std::string key = keyOf(name, labels);
    if (auto it = ids_.find(key); it != ids_.end()) return it->second;
    if (series_.size() >= max_series_ || labels.size() > 16) {
      ++rejected_;
      return window::kRejectedSeries;
    }
    window::SeriesId id = window::SeriesId(series_.size());
    series_.push_back(FakeSeries{key, kind, {}});
    ids_[key] = id;
    return id;
  }
  void record(int, window::SeriesId id, double value, int64_t) override {
    std::lock_guard lock(mu_);
    series_.at(id).values.push_back(value);
    ++records_;
  }
  std::vector<window::SeriesSnapshot> snapshot(int64_t) const override { return {}; }
  window::SeriesSnapshot snapshotOne(window::SeriesId, int64_t) const override { return {}; }
  size_t seriesCount() const override {
    std::lock_guard lock(mu_);
    return series_.size();
  }
  uint64_t rejectedSeries() const override { return rejected_; }

  // Copy of one series by key; empty values when absent.
  FakeSeries get(const std::string& key) const {
    std::lock_guard lock(mu_);
    auto it = ids_.find(key);
    return it == ids_.end() ? FakeSeries{} : series_[it->second];
  }
  uint64_t records() const {
    std::lock_guard lock(mu_);
    return records_;
  }
  std::mutex& mutex() { return mu_; }  // hold it to stall writers (kernel-drop test)

 private:
  mutable std::mutex mu_;
  size_t max_series_;
  uint64_t rejected_ = 0;
  uint64_t records_ = 0;
  std::vector<FakeSeries> series_;
  std::map<std::string, window::SeriesId> ids_;
};

}  // namespace bpftrain::collector::ingest::testing
