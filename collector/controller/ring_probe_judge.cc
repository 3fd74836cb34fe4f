#include "collector/controller/ring_probe_judge.h"

#include "collector/controller/figures.h"

namespace bpftrain::collector::controller {

RingProbeJudge::Verdict RingProbeJudge::update(const Features& f, int64_t now_ns,
                                               std::string& why) {
  const RingProbe& p = f.ring_probe;
  if (!p.fresh(now_ns) || p.ratio <= 0) {
    clear_in_a_row_ = 0;
    return Verdict::kNone;
  }
  if (p.at_ns != seen_at_ns_) {
    seen_at_ns_ = p.at_ns;
    clear_in_a_row_ = p.ratio <= t_.clear_ratio ? clear_in_a_row_ + 1 : 0;
    if (p.ratio >= t_.congested_ratio) congested_ns_ = now_ns;
  }
  const std::string reading =
      figures("the ring probe reads %.1f ms, %.2fx its clear level", p.seconds * 1e3, p.ratio);
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
