// When the kernel's BPF run statistics (BPF_ENABLE_STATS) are on, and what a reading of them
// stands for. While they are on, every BPF program on the host -- ours and anyone else's -- pays
// two clock reads and a per-CPU update per run: on the 2-vCPU development VM that was ~5% of a
// page-fault storm's CPU with bpftrain's probes attached (tools/bench probes, blocks). So by
// default they are on for a short window of every period (`sampled`), and the window's run time
// and run count are scaled to the whole period; `on` keeps them on (exact totals), `off` never
// switches them on. Pure but for the switch: the caller reads the programs' stats when told.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "collector/loader/libbpf_check.h"
#include "common/enum_names.h"

namespace bpftrain::collector::loader {

enum class RunStatsMode : uint8_t { kOff, kSampled, kOn };
inline constexpr auto kRunStatsModeNames = enumNames<RunStatsMode>({
    {RunStatsMode::kOff, "off"},
    {RunStatsMode::kSampled, "sampled"},
    {RunStatsMode::kOn, "on"},
});

// Switches the statistics on and off. The kernel keeps them on while any holder's fd is open
// and asks CAP_SYS_ADMIN to open one, which a collector that dropped its privileges no longer has:
// it then switches through a helper process that kept only that capability
// (collector/app/run_stats_keeper.h).
class RunStatsSwitch {
 public:
  virtual ~RunStatsSwitch() = default;
  virtual Status set(bool on) = 0;
};
// This process's own BPF_ENABLE_STATS fd.
std::unique_ptr<RunStatsSwitch> ownRunStatsSwitch();

struct RunStatsSchedule {
  RunStatsMode mode = RunStatsMode::kSampled;
  int64_t window_ns = 1'000'000'000;   // on for this long ...
  int64_t period_ns = 30'000'000'000;  // ... in every period (sampled)
};

class RunStatsSampler {
 public:
  // What the caller does with the programs' cumulative stats at this poll.
  struct Reading {
    bool read = false;  // read them now (and keep them as the next delta's base)
    double scale = 0;   // record (now - base) * scale; 0: a base only, record nothing
  };

  RunStatsSampler(RunStatsSchedule schedule, std::unique_ptr<RunStatsSwitch> stats_switch);
  ~RunStatsSampler();

  // Called at each poll. `on` mode switched on at construction. A failed switch turns the sampler
  // off for good with one log line (no run-time series then; the gauge below says 0).
  Reading beforeRead(int64_t now_ns);
  // Called after the reading: ends a sampled window (switches off).
  void afterRead(int64_t now_ns);
  // The share of time the readings measure: 1 (on), window/period (sampled), 0 (off or failed).
  double measuredRatio() const;
  // Replaces the switch (before the privilege drop); switches off through the old one first.
  // nullptr: no way to switch, the sampler is off from now on.
  void replaceSwitch(std::unique_ptr<RunStatsSwitch> stats_switch);
  RunStatsMode mode() const { return schedule_.mode; }

 private:
  bool turn(bool on);

  RunStatsSchedule schedule_;
  std::unique_ptr<RunStatsSwitch> switch_;
  bool on_ = false, ending_ = false;
  int64_t on_since_ns_ = 0, covered_from_ns_ = -1, next_on_ns_ = 0;
};

}  // namespace bpftrain::collector::loader
