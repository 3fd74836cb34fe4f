// The arm choice for NCCL jobs (plugins/nccl): arms are NCCL's (algorithm, protocol) pairs that
// the profiler has shown a communicator running, plus "nccl" (no decision: NCCL's own choice,
// which may differ by message size). Like the trainer's policies it is a plain class with no I/O:
// NcclController feeds it one observation per window step and per communicator, the unit tests
// feed it synthetic ones.
//
// Reward: the mean time of the communicator's dominant collective over a step (seconds per
// collective, all ranks), measured only under an arm every rank runs, after `settle_steps`, and
// only while the size mix stays that of the baseline (mean bytes per collective within
// `size_ratio`): a decision covers every size, so arms are compared on the job's own mix. A step
// whose host kernel signals show a disturbance (the caller decides, from the BPF probes) is not
// a reading. Explore-then-exploit: NCCL's choice first, then each available arm once for
// `trial_steps` readings, then the fastest, if it beats the arm in force by `switch_margin`.
// Re-explores when the exploited arm's time drifts by more than `drift` from its estimate for
// `drift_steps` readings (a phase change), when the profiler shows a new arm under NCCL's
// choice, and every `reexplore_after`.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bpftrain::collector::controller {

inline constexpr uint8_t kNcclAnyValue = 0xff;  // wire::kNcclAny

// NCCL's indices (NCCL-PLUGIN-NOTES.md) and the profiler plugin's label values for them.
inline constexpr std::string_view kNcclAlgorithmNames[] = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"};
inline constexpr std::string_view kNcclProtocolNames[] = {"ll", "ll128", "simple"};
inline constexpr std::string_view kNcclCollectiveNames[] = {"broadcast", "reduce", "allgather",
                                                            "reducescatter", "allreduce"};
// Index of `name` in one of the tables above; -1 when absent.
int ncclIndex(std::span<const std::string_view> names, std::string_view name);

struct NcclArm {
  uint8_t algorithm = kNcclAnyValue;  // kNcclAnyValue: NCCL's own choice (no decision)
  uint8_t protocol = kNcclAnyValue;
  bool isNccl() const { return algorithm == kNcclAnyValue; }
  friend bool operator==(const NcclArm&, const NcclArm&) = default;
  friend auto operator<=>(const NcclArm&, const NcclArm&) = default;
};

std::string ncclArmName(const NcclArm& a);  // "ring/ll128", "nccl"

// One communicator at one window step.
struct NcclObservation {
  std::vector<NcclArm> available;  // pairs the profiler showed under any arm, so far
  NcclArm in_force;                // what every rank runs now (the caller checked the epochs)
  bool consistent = true;          // false: ranks disagree or a switch is pending
  // This step's delta over all ranks for the dominant collective.
  uint64_t collectives = 0;
  double mean_seconds = 0;  // per collective
  double mean_bytes = 0;    // per collective
  // Share of those collectives that ran with in_force's pair (1 under NCCL's choice): a pair the
  // tuner could not apply (unsupported for this size or collective) leaves NCCL's choice.
  double followed = 1;
  bool host_disturbed = false;
};

struct NcclPolicyConfig {
  int settle_steps = 1;          // readings ignored after a switch (the step mixes arms)
  int trial_steps = 3;           // readings per arm before it is judged
  uint64_t min_collectives = 4;  // a step with fewer timed collectives is not a reading
  double switch_margin = 0.05;   // a different arm must be this much faster
  double size_ratio = 2.0;       // mean bytes within this factor of the baseline's
  double drift = 0.25;           // exploited arm slower/faster than its estimate by this
  int drift_steps = 3;           // for this many readings in a row: re-explore
  std::chrono::nanoseconds reexplore_after = std::chrono::minutes(10);
};

struct NcclChoice {
  bool change = false;
  NcclArm to;
  std::string_view reason = "";  // explore, exploit, change_detected (decisions_total's label)
  std::string detail;
};

class NcclPolicy {
 public:
  explicit NcclPolicy(NcclPolicyConfig config = {}) : config_(config) {}
  std::string_view name() const { return "nccl"; }
  NcclChoice decide(const NcclObservation& o, int64_t now_ns);

  // For tests and the decisions log: mean seconds per collective (0 when unmeasured).
  double meanSeconds(const NcclArm& a) const;
  int readings(const NcclArm& a) const;
  int explorations() const { return explorations_; }

 private:
  struct ArmStats {
    NcclArm arm;
    double sum = 0;
    int n = 0;
    bool excluded = false;  // forced, but NCCL did not run it (the tuner could not apply it)
  };
  ArmStats& stats(const NcclArm& a);
  const ArmStats* find(const NcclArm& a) const;
  void forget(int64_t now_ns);

  NcclPolicyConfig config_;
  std::deque<ArmStats> stats_;  // a deque: references stay valid as arms are added
  NcclArm stint_arm_;
  bool stint_valid_ = false;
  int stint_steps_ = 0;
  double baseline_bytes_ = 0;  // mean bytes per collective under NCCL's choice
  int drift_count_ = 0;
  int explorations_ = 0;
  int64_t explored_ns_ = -1;  // when the last round of exploration began
  bool changed_ = false;      // the next move re-explores after a detected change
  static constexpr double kFollowedShare = 0.9;
};

}  // namespace bpftrain::collector::controller
