// The collector's view of the BPF probes: attach what this machine allows, follow the sender
// registry's training processes, and each window step fold the kernel counters into the series
// store as bpftrain_* series with the rank's job/rank labels. A probe that cannot attach is a
// status (probe_up 0 + reason), never an exception.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "collector/discovery/discovered_rank.h"
#include "collector/ingest/sender_registry.h"
#include "collector/loader/rdma_source.h"
#include "collector/loader/run_stats_sampler.h"
#include "collector/window/series_store.h"

namespace bpftrain::collector::loader {

struct ProbeOptions {
  bool all_processes = false;        // --all
  std::vector<pid_t> pids;           // --pid (repeatable); job="manual", rank=pid's index
  std::vector<std::string> cgroups;  // --cgroup PATH (repeatable)
  std::set<std::string> disabled;    // --disable-probe NAME: never attached (probe_up 0, why)
  std::set<std::string> enabled;     // --enable-probe NAME: a probe off by default attached
  // Tuning (the defaults are what the collector wants):
  RunStatsSchedule run_stats;  // probe run time (BPF_ENABLE_STATS): sampled, on or off
  uint64_t tcp_sample_interval_ns = 1'000'000;  // at most one queue-depth sample per socket per ms
  uint64_t pmu_sample_period = 10'000;          // PMU events per BPF run (where a PMU exists)
  std::string rdma_sysfs_root = "/sys/class/infiniband";  // RDMA port counters (tests: a fixture)
  // Which source counts a process's work requests (--rdma-sources, collector/loader/rdma_source.h):
  // auto instruments each once (rdma_rxe where it sees every device the process opened, else
  // rdma_verbs' uprobes); all attaches every source that can see it.
  RdmaSources rdma_sources = RdmaSources::kAuto;
  // rdma_rxe by its kprobes even where its fentry programs would attach (--rdma-rxe-attach
  // kprobe): the two compared in one boot, and the fallback path tested where fentry works.
  bool rdma_rxe_kprobes = false;
  // rdma_verbs' non-faulting completion program even where the sleepable one loads
  // (--rdma-verbs-read nonfaulting): the fallback of a kernel before 6.0, tested where 6.0+ runs.
  bool rdma_verbs_nonfaulting = false;
  std::string proc_root = "/proc";
  // Bytes of each ring buffer (a power of 2, at least a page); 0: the object's own (1 MiB). Tests
  // shrink it to fill a ring and check that every event lost is counted.
  uint32_t ring_bytes = 0;
};

struct ProbeStatus {
  std::string name;  // e.g. "migrations", "tlb_flush", "dtlb_misses"
  bool up = false;
  std::string reason;     // why not, in words a user can act on; empty when up
  bool left_out = false;  // down on purpose: --disable-probe, or off by default
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
  // Between window steps (the controller's looks): only the ring buffers (TCP samples) into the
  // store, stamped now_ns; no target sync, counters or loss. Without it the looks read RTT as it
  // was at the last step, up to a step (500 ms) old, when the switch they try to catch is the
  // end of the training step in flight. From the same thread as poll().
  virtual void drainRings(int64_t now_ns) = 0;
  // The ranks --discover found (collector/discovery/): from the next poll() each has a slot
  // labelled with its job and rank, as a hello-announced rank has; a process that is also a
  // registered sender keeps the sender's labels. A rank no longer listed is released and its
  // series may expire (--series-ttl). From the same thread as poll().
  virtual void setDiscovered(std::vector<discovery::DiscoveredRank> ranks) = 0;
  virtual std::vector<ProbeStatus> status() const = 0;
  // Before a privilege drop that takes CAP_SYS_ADMIN: from now on run statistics are switched
  // through `stats_switch` (a helper that kept the capability).
  virtual void useRunStatsSwitch(std::unique_ptr<RunStatsSwitch> stats_switch) = 0;

  // For --list-probes: tries each probe on this machine and reports, then detaches everything.
  static std::vector<ProbeStatus> listProbes();
  // What a probe attaches to (tracepoint, PMU event, USDT), for --list-probes; "" if unknown.
  static std::string describe(const std::string& probe);
  // Why a probe is off unless --enable-probe names it; "" for one on by default.
  static std::string offByDefault(const std::string& probe);
};

}  // namespace bpftrain::collector::loader
