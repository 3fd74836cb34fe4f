// StatsD state that outlives a line and is shared by every ingest thread: gauge values (a "+3|g"
// delta applies to the value any client last set, whichever socket it came through) and set
// members (a set's gauge is the number of distinct members in the current window). The kernel
// spreads clients over ingest threads by flow hash, so per-thread state would diverge as soon as
// two clients write one gauge or one set.
//
// Each gauge and set has its own lock (uncontended unless two threads write the same series at
// once); a thread finds its cells once per series through the dispatcher's key cache, so the
// shared maps' mutex is taken only when a thread first sees a series.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "collector/window/series_store.h"

namespace bpftrain::collector::ingest {

// Bound on live members of one set: more distinct members in one window are dropped (set_limit).
inline constexpr size_t kMaxSetMembers = 100'000;

// Distinct member hashes over a sliding window of steps, the same window the series store keeps
// (the last `steps` completed steps and the step in progress). Each member remembers the last step
// it was seen in; a ring of per-step counts gives the distinct count without a scan.
class DistinctWindow {
 public:
  explicit DistinctWindow(int steps);
  // Adds a member seen in `step` (steps never go backwards for one window); false when the set is
  // full and the member is new.
  bool add(uint64_t member_hash, int64_t step);
  // Distinct members seen in the window ending at `step`.
  uint64_t count(int64_t step) const;

 private:
  static constexpr int64_t kEmpty = std::numeric_limits<int64_t>::min();
  struct Slot {
    uint64_t hash = 0;
    int64_t last_step = kEmpty;
  };
  bool live(int64_t last_step, int64_t step) const { return last_step >= step - steps_; }
  uint64_t& ringAt(int64_t step);
  void rebuild(int64_t step);

  int steps_;
  std::vector<Slot> slots_;
  size_t occupied_ = 0;  // slots holding a member, live or expired
  std::vector<uint64_t> ring_counts_;
  std::vector<int64_t> ring_steps_;
};

class StatsdState {
 public:
  explicit StatsdState(const window::WindowConfig& config);

  struct GaugeCell {
    std::mutex lock;
    double value = 0;
    int64_t last_ns = std::numeric_limits<int64_t>::min();
  };
  struct SetCell {
    std::mutex lock;
    window::SeriesId id = window::kRejectedSeries;
    DistinctWindow members;
    int64_t last_ns = std::numeric_limits<int64_t>::min();
    uint64_t last_count = 0;  // the count recorded last
    explicit SetCell(int steps) : members(steps) {}
  };

  // The cell of a series, created on first use; stable for the life of this object.
  GaugeCell& gauge(window::SeriesId id);
  SetCell& set(window::SeriesId id);

  // Sets (or, relative, adds to) the gauge and records its value. Records carry strictly
  // increasing timestamps per gauge, so the store's "last value" is the last one applied even
  // when two threads' clocks were read in the other order.
  static void applyGauge(GaugeCell& cell, window::SeriesStore& store, int writer,
                         window::SeriesId id, double value, bool relative, int64_t now_ns);
  // Adds a member and records the set's distinct count; false when the set is full.
  static bool addMember(SetCell& cell, window::SeriesStore& store, int writer, uint64_t member_hash,
                        int64_t now_ns);
  // Records every set's distinct count at now_ns, so that members leaving the window lower the
  // gauge without new traffic. One ingest thread calls it once per window step. A set whose count
  // was already recorded as 0 is not written again, so an idle set can expire (--series-ttl).
  void refreshSets(window::SeriesStore& store, int writer, int64_t now_ns);

  size_t sets() const;

 private:
  int steps_;
  mutable std::mutex mutex_;
  std::unordered_map<window::SeriesId, std::unique_ptr<GaugeCell>> gauges_;
  std::unordered_map<window::SeriesId, std::unique_ptr<SetCell>> sets_;
  std::vector<SetCell*> set_list_;  // refresh order; guarded by mutex_
};

}  // namespace bpftrain::collector::ingest
