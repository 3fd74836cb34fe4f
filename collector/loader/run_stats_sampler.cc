// The sampling schedule of BPF run statistics (run_stats_sampler.h).
#include "collector/loader/run_stats_sampler.h"

#include <bpf/bpf.h>

#include <cstdio>

#include "collector/loader/bpf_handles.h"

namespace bpftrain::collector::loader {
namespace {

class OwnRunStatsSwitch final : public RunStatsSwitch {
 public:
  Status set(bool on) override {
    if (!on) {
      fd_ = UniqueFd();
      return {};
    }
    if (fd_.valid()) return {};
    int fd = -1;
    BPFTRAIN_TRY(
        check("cannot switch BPF run statistics on (BPF_ENABLE_STATS needs CAP_SYS_ADMIN)", [&] {
          fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
          return fd;
        }));
    fd_ = UniqueFd(fd);
    return {};
  }

 private:
  UniqueFd fd_;  // the kernel keeps the statistics on while it is open, and off after a crash
};

}  // namespace

std::unique_ptr<RunStatsSwitch> ownRunStatsSwitch() {
  return std::make_unique<OwnRunStatsSwitch>();
}

RunStatsSampler::RunStatsSampler(RunStatsSchedule schedule,
                                 std::unique_ptr<RunStatsSwitch> stats_switch)
    : schedule_(schedule), switch_(std::move(stats_switch)) {
  if (schedule_.window_ns <= 0 || schedule_.period_ns < schedule_.window_ns)
    schedule_.mode = RunStatsMode::kOn;  // no sensible schedule: exact totals rather than none
  if (schedule_.mode == RunStatsMode::kOn) (void)turn(true);  // from load: every run counted
}

RunStatsSampler::~RunStatsSampler() {
  if (on_ && switch_) (void)switch_->set(false);
}

bool RunStatsSampler::turn(bool on) {
  if (!switch_) {
    schedule_.mode = RunStatsMode::kOff;
    return false;
  }
  const Status status = switch_->set(on);
  if (status.ok()) {
    on_ = on;
    return true;
  }
  std::fprintf(stderr,
               "bpftrain: %s: probe run time not exported (bpftrain_probe_run_seconds_total); "
               "run as root, or give the collector CAP_SYS_ADMIN, or set sysctl "
               "kernel.bpf_stats_enabled=1 and --probe-run-stats on\n",
               status.message().c_str());
  schedule_.mode = RunStatsMode::kOff;
  on_ = false;
  return false;
}

RunStatsSampler::Reading RunStatsSampler::beforeRead(int64_t now_ns) {
  switch (schedule_.mode) {
    case RunStatsMode::kOff:
      return {};
    case RunStatsMode::kOn:
      return {true, 1};
    case RunStatsMode::kSampled:
      break;
  }
  if (covered_from_ns_ < 0) covered_from_ns_ = now_ns;
  if (!on_) {
    if (now_ns < next_on_ns_ || !turn(true)) return {};
    on_since_ns_ = now_ns;
    return {true, 0};
  }
  if (now_ns - on_since_ns_ < schedule_.window_ns) return {};
  // The window's runs stand for everything since the last window ended.
  ending_ = true;
  const double measured = double(now_ns - on_since_ns_);
  return {true, double(now_ns - covered_from_ns_) / measured};
}

void RunStatsSampler::afterRead(int64_t now_ns) {
  if (!ending_) return;
  ending_ = false;
  covered_from_ns_ = now_ns;
  next_on_ns_ = now_ns + schedule_.period_ns - schedule_.window_ns;
  (void)turn(false);
}

double RunStatsSampler::measuredRatio() const {
  switch (schedule_.mode) {
    case RunStatsMode::kOff:
      return 0;
    case RunStatsMode::kOn:
      return 1;
    case RunStatsMode::kSampled:
      break;
  }
  return double(schedule_.window_ns) / double(schedule_.period_ns);
}

void RunStatsSampler::replaceSwitch(std::unique_ptr<RunStatsSwitch> stats_switch) {
  const bool was_on = on_;
  if (on_ && switch_) (void)switch_->set(false);
  on_ = false;
  switch_ = std::move(stats_switch);
  if (!switch_) schedule_.mode = RunStatsMode::kOff;
  if (was_on) (void)turn(true);  // on mode stays on; a sampled window goes on where it was
}

}  // namespace bpftrain::collector::loader
