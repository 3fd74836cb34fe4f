#include "collector/ingest/statsd_state.h"

#include <algorithm>

namespace bpftrain::collector::ingest {
namespace {

// The series store's window in steps: ceil(max(window, step) / step) completed steps.
int windowSteps(const window::WindowConfig& c) {
  const int64_t step = std::max<int64_t>(c.step.count(), 1);
  const int64_t window = std::max<int64_t>(c.window.count(), step);
  return int((window + step - 1) / step);
}

size_t roundUpPow2(size_t n) {
  size_t c = 16;
  while (c < n) c *= 2;
  return c;
}

}  // namespace

DistinctWindow::DistinctWindow(int steps)
    : steps_(std::max(steps, 1)),
      slots_(16),
      ring_counts_(size_t(steps_) + 1, 0),
      ring_steps_(size_t(steps_) + 1, kEmpty) {}

uint64_t& DistinctWindow::ringAt(int64_t step) {
  const int64_t n = int64_t(ring_counts_.size());
  size_t i = size_t(((step % n) + n) % n);
  if (ring_steps_[i] != step) {
    ring_steps_[i] = step;
    ring_counts_[i] = 0;
  }
  return ring_counts_[i];
}

uint64_t DistinctWindow::count(int64_t step) const {
  uint64_t n = 0;
  for (size_t i = 0; i < ring_counts_.size(); ++i)
    if (ring_steps_[i] != kEmpty && ring_steps_[i] <= step && live(ring_steps_[i], step))
      n += ring_counts_[i];
  return n;
}

void DistinctWindow::rebuild(int64_t step) {
  size_t live_members = 0;
  for (const Slot& s : slots_)
    if (s.last_step != kEmpty && live(s.last_step, step)) ++live_members;
  std::vector<Slot> old = std::move(slots_);
  slots_.assign(roundUpPow2(std::max<size_t>(live_members * 4, 16)), Slot{});
  const size_t mask = slots_.size() - 1;
  occupied_ = 0;
  for (const Slot& s : old) {
    if (s.last_step == kEmpty || !live(s.last_step, step)) continue;
    size_t i = s.hash & mask;
    while (slots_[i].last_step != kEmpty) i = (i + 1) & mask;
    slots_[i] = s;
    ++occupied_;
  }
}

bool DistinctWindow::add(uint64_t hash, int64_t step) {
  if ((occupied_ + 1) * 2 > slots_.size()) rebuild(step);
  const size_t mask = slots_.size() - 1;
  size_t reuse = slots_.size();  // first expired slot on the probe path
  size_t i = hash & mask;
  for (; slots_[i].last_step != kEmpty; i = (i + 1) & mask) {
    Slot& s = slots_[i];
    if (s.hash == hash) {
      if (live(s.last_step, step)) {
        if (s.last_step == step) return true;
        // Seen earlier in the window: it moves from its old step's count to this one's.
        const int64_t n = int64_t(ring_counts_.size());
        size_t old = size_t(((s.last_step % n) + n) % n);
        if (ring_steps_[old] == s.last_step && ring_counts_[old] > 0) --ring_counts_[old];
      }
      s.last_step = step;
      ++ringAt(step);
      return true;
    }
    if (reuse == slots_.size() && !live(s.last_step, step)) reuse = i;
  }
  if (count(step) >= kMaxSetMembers) return false;
  if (reuse != slots_.size()) {
    slots_[reuse] = Slot{hash, step};
  } else {
    slots_[i] = Slot{hash, step};
    ++occupied_;
  }
  ++ringAt(step);
  return true;
}

StatsdState::StatsdState(const window::WindowConfig& config) : steps_(windowSteps(config)) {}

StatsdState::GaugeCell& StatsdState::gauge(window::SeriesId id) {
  std::lock_guard lock(mutex_);
  auto& cell = gauges_[id];
  if (!cell) cell = std::make_unique<GaugeCell>();
  return *cell;
}

StatsdState::SetCell& StatsdState::set(window::SeriesId id) {
  std::lock_guard lock(mutex_);
  auto& cell = sets_[id];
  if (!cell) {
    cell = std::make_unique<SetCell>(steps_);
    cell->id = id;
    set_list_.push_back(cell.get());
  }
  return *cell;
}

size_t StatsdState::sets() const {
  std::lock_guard lock(mutex_);
  return set_list_.size();
}

void StatsdState::applyGauge(GaugeCell& cell, window::SeriesStore& store, int writer,
                             window::SeriesId id, double value, bool relative, int64_t now_ns) {
  std::lock_guard lock(cell.lock);
  cell.value = relative ? cell.value + value : value;
  cell.last_ns = std::max(now_ns, cell.last_ns + 1);
  store.record(writer, id, cell.value, cell.last_ns);
}

bool StatsdState::addMember(SetCell& cell, window::SeriesStore& store, int writer,
                            uint64_t member_hash, int64_t now_ns) {
  std::lock_guard lock(cell.lock);
  const int64_t t = std::max(now_ns, cell.last_ns + 1);
  const int64_t step = store.stepOf(t);
  bool added = cell.members.add(member_hash, step);
  cell.last_ns = t;
  cell.last_count = cell.members.count(step);
  store.record(writer, cell.id, double(cell.last_count), t);
  return added;
}

void StatsdState::refreshSets(window::SeriesStore& store, int writer, int64_t now_ns) {
  std::vector<SetCell*> cells;
  {
    std::lock_guard lock(mutex_);
    cells = set_list_;
  }
  for (SetCell* c : cells) {
    std::lock_guard lock(c->lock);
    const int64_t t = std::max(now_ns, c->last_ns + 1);
    const uint64_t n = c->members.count(store.stepOf(t));
    if (n == 0 && c->last_count == 0) continue;  // idle: leave it to expire
    c->last_ns = t;
    c->last_count = n;
    store.record(writer, c->id, double(n), t);
  }
}

}  // namespace bpftrain::collector::ingest
