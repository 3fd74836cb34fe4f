// Switching BPF run statistics after the privilege drop (collector/app/privilege.h). The kernel
// asks CAP_SYS_ADMIN of whoever switches them on, a capability the running collector gives up, so
// before the drop it forks a keeper: a process of the collector's user that kept only
// CAP_SYS_ADMIN (no_new_privs, no other fd) and does one thing, hold or close a BPF_ENABLE_STATS
// fd as the collector asks over a pipe. It dies with the collector (PR_SET_PDEATHSIG, and EOF on
// the pipe), and the kernel switches the statistics off with its fd.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>

#include "collector/loader/run_stats_sampler.h"

namespace bpftrain::collector::loader {

class RunStatsKeeper final : public RunStatsSwitch {
 public:
  // Forks the keeper, which becomes `uid`/`gid` (the user the collector drops to; no supplementary
  // groups) keeping CAP_SYS_ADMIN across the switch. nullptr with `error` when this process has
  // no CAP_SYS_ADMIN to keep, or fork or pipe fail.
  static std::unique_ptr<RunStatsKeeper> start(unsigned uid, unsigned gid, std::string& error);
  ~RunStatsKeeper() override;
  Status set(bool on) override;
  pid_t pid() const { return pid_; }

 private:
  RunStatsKeeper(pid_t pid, int to_keeper, int from_keeper)
      : pid_(pid), to_keeper_(to_keeper), from_keeper_(from_keeper) {}
  pid_t pid_;
  int to_keeper_, from_keeper_;
};

}  // namespace bpftrain::collector::loader
