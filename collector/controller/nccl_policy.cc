#include "collector/controller/nccl_policy.h"

#include <cmath>
#include <cstdio>

namespace bpftrain::collector::controller {

int ncclIndex(std::span<const std::string_view> names, std::string_view name) {
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return int(i);
  return -1;
}

std::string ncclArmName(const NcclArm& a) {
  if (a.isNccl()) return "nccl";
  std::string out = a.algorithm < std::size(kNcclAlgorithmNames)
                        ? std::string(kNcclAlgorithmNames[a.algorithm])
                        : std::to_string(a.algorithm);
  out += '/';
  out += a.protocol < std::size(kNcclProtocolNames) ? std::string(kNcclProtocolNames[a.protocol])
                                                    : std::string("any");
  return out;
}

NcclPolicy::ArmStats& NcclPolicy::stats(const NcclArm& a) {
  for (ArmStats& s : stats_)
    if (s.arm == a) return s;
  stats_.push_back(ArmStats{a});
  return stats_.back();
}

const NcclPolicy::ArmStats* NcclPolicy::find(const NcclArm& a) const {
  for (const ArmStats& s : stats_)
    if (s.arm == a) return &s;
  return nullptr;
}

double NcclPolicy::meanSeconds(const NcclArm& a) const {
  const ArmStats* s = find(a);
  return s != nullptr && s->n > 0 ? s->sum / s->n : 0;
}

int NcclPolicy::readings(const NcclArm& a) const {
  const ArmStats* s = find(a);
  return s != nullptr ? s->n : 0;
}

void NcclPolicy::forget(int64_t now_ns) {
  for (ArmStats& s : stats_) s = ArmStats{s.arm};
  explored_ns_ = now_ns;
  drift_count_ = 0;
  changed_ = true;
}

NcclChoice NcclPolicy::decide(const NcclObservation& o, int64_t now_ns) {
  NcclChoice d;
  d.to = o.in_force;
  if (!o.consistent) return d;  // a switch is in flight: nothing is measured or decided
  if (!stint_valid_ || o.in_force != stint_arm_) {
    stint_arm_ = o.in_force;
    stint_valid_ = true;
    stint_steps_ = 0;
    drift_count_ = 0;
  }
  ++stint_steps_;
  if (explored_ns_ < 0) explored_ns_ = now_ns;
  if (now_ns - explored_ns_ > config_.reexplore_after.count()) forget(now_ns);

  ArmStats& cur = stats(o.in_force);
  char buf[256];
  const bool reading = stint_steps_ > config_.settle_steps &&
                       o.collectives >= config_.min_collectives && o.mean_seconds > 0 &&
                       !o.host_disturbed;
  if (reading && !o.in_force.isNccl() && o.followed < kFollowedShare) {
    // Forced, but NCCL ran something else: this pair is not available for this communicator.
    cur.excluded = true;
  } else if (reading) {
    if (o.in_force.isNccl() && baseline_bytes_ <= 0) baseline_bytes_ = o.mean_bytes;
    const bool mix_changed = baseline_bytes_ > 0 && o.mean_bytes > 0 &&
                             (o.mean_bytes > baseline_bytes_ * config_.size_ratio ||
                              o.mean_bytes * config_.size_ratio < baseline_bytes_);
    if (mix_changed) {
      // Another size mix: every estimate is of the old one, and only NCCL's own choice can
      // give the new baseline.
      forget(now_ns);
      baseline_bytes_ = o.in_force.isNccl() ? o.mean_bytes : 0;
      if (!o.in_force.isNccl()) {
        d.change = true;
        d.to = NcclArm{};
        d.reason = "change_detected";
        std::snprintf(buf, sizeof buf, "size mix moved to %.0f bytes per collective", o.mean_bytes);
        d.detail = buf;
        changed_ = false;
        return d;
      }
    } else if (cur.n >= config_.trial_steps) {
      const double mean = cur.sum / cur.n;
      drift_count_ = std::abs(o.mean_seconds / mean - 1) > config_.drift ? drift_count_ + 1 : 0;
      if (drift_count_ >= config_.drift_steps) forget(now_ns);
    }
    ArmStats& now_stats = stats(o.in_force);  // forget() kept the entries, so still valid
    now_stats.sum += o.mean_seconds;
    ++now_stats.n;
  }
  if (!cur.excluded && cur.n < config_.trial_steps) return d;  // still measuring this arm

  // Untried arms first: NCCL's choice (the baseline), then the profiler's pairs in order.
  std::vector<NcclArm> arms{NcclArm{}};
  for (const NcclArm& a : o.available)
    if (!a.isNccl()) arms.push_back(a);
  const ArmStats* best = nullptr;
  for (const NcclArm& a : arms) {
    const ArmStats& s = stats(a);
    if (s.excluded) continue;
    if (s.n < config_.trial_steps) {
      d.change = true;
      d.to = a;
      d.reason = changed_ ? "change_detected" : "explore";
      changed_ = false;
      ++explorations_;
      std::snprintf(buf, sizeof buf, "untried arm; %s at %.3f ms per collective",
                    ncclArmName(o.in_force).c_str(), meanSeconds(o.in_force) * 1e3);
      d.detail = buf;
      return d;
    }
  }
  for (const ArmStats& s : stats_)
    if (!s.excluded && s.n >= config_.trial_steps &&
        (best == nullptr || s.sum / s.n < best->sum / best->n))
      best = &s;
  if (best == nullptr) return d;
  // A pair must beat NCCL's own choice by the margin; otherwise NCCL's choice (which may differ
  // by size) is the answer and no decision is in force.
  NcclArm target = best->arm;
  const double nccl_mean = meanSeconds(NcclArm{});
  if (!target.isNccl() && readings(NcclArm{}) >= config_.trial_steps &&
      best->sum / best->n >= nccl_mean * (1 - config_.switch_margin))
    target = NcclArm{};
  if (target == o.in_force) return d;
  const double target_mean = meanSeconds(target);
  // Back to NCCL's choice needs no margin; between two pairs, the margin holds again.
  if (!target.isNccl() && !cur.excluded && !o.in_force.isNccl() &&
      target_mean >= meanSeconds(o.in_force) * (1 - config_.switch_margin))
    return d;
  d.change = true;
  d.to = target;
  d.reason = "exploit";
  std::snprintf(buf, sizeof buf, "%s at %.3f ms per collective beats %s at %.3f%s",
                ncclArmName(target).c_str(), target_mean * 1e3, ncclArmName(o.in_force).c_str(),
                meanSeconds(o.in_force) * 1e3, cur.excluded ? " (not followed)" : "");
  d.detail = buf;
  return d;
}

}  // namespace bpftrain::collector::controller
