#include "collector/controller/ring_probe_judge.h"

#include <algorithm>

#include "collector/controller/figures.h"

namespace bpftrain::collector::controller {

void RingProbeJudge::reset(const Features& f) {
  clear_in_a_row_ = 0;
  seen_at_ns_ = f.ring_probe.at_ns;
  congested_ns_ = -1;
  congested_n_ = 0;
}

double RingProbeJudge::congestedLevel() const {
  const uint32_t n = std::min<uint32_t>(congested_n_, kHistory);
  if (n < uint32_t(std::max(1, t_.min_congested_rounds))) return 0;
  std::array<float, kHistory> sorted = congested_;
  std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.begin() + n);
  return sorted[n / 2];
}

RingProbeJudge::Verdict RingProbeJudge::update(const Features& f, int64_t now_ns,
                                               std::string& why) {
  const RingProbe& p = f.ring_probe;
  if (!p.fresh(now_ns) || p.seconds <= 0) {
    clear_in_a_row_ = 0;
    return Verdict::kNone;
  }
  // Without the ring's clear level (a job that started on congested links climbed before the
  // ring probed them clear) the rounds are judged against their level since the move alone: a
  // drop is the lift, a hold the congestion. Before, such a job had no verdict at all and the
  // rules re-probed the throttled ring on their timer (netlab, lo at 500 Mbit/s from the start:
  // 8 s after the climb, back 1-2 s later, again 16 s on).
  const bool has_clear_level = p.ratio > 0;
  const double level = congestedLevel();
  const bool dropped = level > 0 && p.seconds <= t_.drop_fraction * level;
  if (p.at_ns != seen_at_ns_) {
    seen_at_ns_ = p.at_ns;
    const bool clear = (has_clear_level && p.ratio <= t_.clear_ratio) || dropped;
    clear_in_a_row_ = clear ? clear_in_a_row_ + 1 : 0;
    const bool holds = !clear && level > 0 && p.seconds >= t_.hold_fraction * level;
    if (((has_clear_level && p.ratio >= t_.congested_ratio) || holds) && !dropped)
      congested_ns_ = now_ns;
    if (!clear) {
      congested_[congested_n_ % kHistory] = float(p.seconds);
      ++congested_n_;
    }
  }
  std::string reading =
      has_clear_level
          ? figures("the ring probe reads %.1f ms, %.2fx its clear level", p.seconds * 1e3, p.ratio)
          : figures("the ring probe reads %.1f ms (no clear level yet)", p.seconds * 1e3, 0);
  if (level > 0)
    reading += figures(" and %.2fx its %.1f ms since the move", p.seconds / level, level * 1e3);
  if (clear_in_a_row_ >= t_.clear_readings) {
    why = reading + figures(" (%.0f rounds in a row)", double(clear_in_a_row_), 0);
    return Verdict::kClear;
  }
  if (congested_ns_ >= 0 && now_ns - congested_ns_ < RingProbe::kFreshNs) {
    why = reading;
    return Verdict::kCongested;
  }
  return Verdict::kNone;
}

}  // namespace bpftrain::collector::controller
