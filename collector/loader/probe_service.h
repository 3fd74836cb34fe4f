// The collector's view of the BPF probes: attach what this machine allows, follow the sender
// registry's training processes, and each window step fold the kernel counters into the series
// store as bpftrain_* series with the rank's job/rank labels. A probe that cannot attach is a
// status (probe_up 0 + reason), never an exception.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "collector/ingest/sender_registry.h"
#include "collector/window/series_store.h"

namespace bpftrain::collector::loader {

struct ProbeOptions {
  bool all_processes = false;        // --all
  std::vector<pid_t> pids;           // --pid (repeatable); job="manual", rank=pid's index
  std::vector<std::string> cgroups;  // --cgroup PATH (repeatable)
};

struct ProbeStatus {
  std::string name;    // e.g. "migrations", "tlb_flush", "dtlb_misses"
  bool up = false;
  std::string reason;  // why not, in words a user can act on; empty when up
};

class ProbeService {
 public:
  // Returns nullptr with `error` set when BPF cannot be used at all (missing capability:
  // names it and suggests --no-bpf). Probes that fail individually are only reported in status().
  static std::unique_ptr<ProbeService> create(const ProbeOptions& options,
                                              window::SeriesStore& store, int writer_index,
                                              std::string& error);
  virtual ~ProbeService() = default;

  // Called once per window step from one thread: syncs targets from the registry (when its
  // version changed), reads the maps and records deltas into the store.
  virtual void poll(const ingest::SenderRegistry& registry, int64_t now_ns) = 0;
  virtual std::vector<ProbeStatus> status() const = 0;

  // For --list-probes: tries each probe on this machine and reports, then detaches everything.
  static std::vector<ProbeStatus> listProbes();
};

}  // namespace bpftrain::collector::loader
