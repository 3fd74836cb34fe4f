// The trainer's test and benchmark hooks, in one place so that RankRunner::run() reads as the
// training loop.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

#include "trainer/app/options.h"
#include "trainer/control/config_sync.h"

namespace bpftrain::trainer::app {

// What they are:
//   --switch-every K --switch-seed S  rank 0 draws a topology and pinning every K steps into the
//                                      same decision path as the controller's (a DecisionSource);
//   --overhead-ab K                   blocks of K steps alternate telemetry + decision delivery off
//                                      and on; per-step times of both halves, medians at the end;
//   --sync tail|broadcast             pins how config words travel (auto otherwise).
class RunHooks {
 public:
  // topologies: bit t set when Topology t runs on this transport (the draws pick among them).
  RunHooks(const Options& o, uint64_t start_step, uint32_t topologies)
      : delivery_(control::kDeliveryNames.parse(o.sync).value_or(control::Delivery::kAuto)),
        overhead_ab_(uint64_t(std::max(o.overhead_ab, 0))),
        start_step_(start_step) {
    if (o.switch_every > 0) draws_.emplace(o.switch_every, o.switch_seed, topologies);
    if (overhead_ab_ > 0) {
      on_.reserve(o.steps);
      off_.reserve(o.steps);
    }
  }

  control::Delivery delivery() const { return delivery_; }
  bool fixedSchedule() const { return draws_.has_value(); }
  control::DecisionSource* draws() { return draws_ ? &*draws_ : nullptr; }
  // Off blocks of an A/B run send no telemetry and collect no decisions; otherwise always on.
  bool featuresOn(uint64_t step) const {
    return overhead_ab_ == 0 || ((step - start_step_) / overhead_ab_) % 2 == 1;
  }
  void recordStep(bool features_on, double step_seconds) {
    if (overhead_ab_ > 0) (features_on ? on_ : off_).push_back(step_seconds);
  }
  void report(int rank) {
    if (overhead_ab_ == 0) return;
    const double on = median(on_), off = median(off_);
    std::printf(
        "bpftrain-train: rank %d: overhead_ab median step off %.6f s on %.6f s "
        "overhead %+.2f%% (%zu/%zu steps)\n",
        rank, off, on, off > 0 ? (on / off - 1) * 100 : 0.0, off_.size(), on_.size());
  }

 private:
  static double median(std::vector<double>& v) {
    if (v.empty()) return 0.0;
    std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
    return v[v.size() / 2];
  }

  control::Delivery delivery_;
  uint64_t overhead_ab_;
  uint64_t start_step_;
  std::optional<control::SwitchDraws> draws_;
  std::vector<double> on_, off_;
};

}  // namespace bpftrain::trainer::app
