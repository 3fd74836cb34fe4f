// bpftrain-collector configuration: defaults, then the JSON --config file, then flags (flags
// win). Every flag has a JSON key of the same name with '_' for '-' (e.g. "ingest_threads").
// A mistake is one line naming the key or flag and what would be accepted; the caller exits 2.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "collector/app/log.h"
#include "common/host_port.h"

namespace bpftrain::collector::app {

struct CollectorConfig {
  std::string config_path;              // --config
  HostPort listen{"127.0.0.1", 9470};   // --listen: UDP ingest (common/host_port.h grammar)
  HostPort metrics{"127.0.0.1", 9471};  // --metrics: Prometheus /metrics
  std::chrono::nanoseconds window = std::chrono::seconds(5);
  std::chrono::nanoseconds step = std::chrono::milliseconds(500);
  bool no_bpf = false;
  // --probe-run-stats: BPF run statistics (bpftrain_probe_run_seconds_total) sampled (1 s of
  // every 30 s: every BPF program on the host pays their timing while they are on), on or off.
  std::string probe_run_stats = "sampled";
  bool control = false;
  bool nccl_control = false;  // --nccl-control: steer NCCL jobs' tuner plugins (same secret, mode)
  std::string policy = "rules";         // rules|bandit
  std::optional<HostPort> upstream;     // parent collector
  std::string secret_path;              // HMAC key for control decisions
  std::string control_mode = "act";     // act: send decisions; advise: only log them
  HostPort trainer{"127.0.0.1", 9472};  // trainer rank 0's control port
  std::string job;                      // job the controller steers; empty: first seen
  std::string decisions_log;            // controller decisions, JSON lines
  // The controller decides on this much of the most recent data (a few steps), so a phase change
  // shows within about a second; the exposition keeps the full --window.
  std::chrono::nanoseconds controller_window = std::chrono::seconds(1);
  // Between window steps the controller looks this often for a move that cannot wait for the
  // next step (a decisive congestion); 0: only at steps.
  std::chrono::nanoseconds controller_period = std::chrono::milliseconds(100);
  std::chrono::nanoseconds controller_react_window = std::chrono::milliseconds(250);
  std::string features_log;  // controller features every features_log_every, JSON lines
  std::chrono::nanoseconds features_log_every = std::chrono::seconds(2);
  // The user the collector runs as once started (collector/app/privilege.h); "root": stays root.
  // Empty: "bpftrain" when that user exists (bpftrain.sysusers), else stays.
  std::string user;
  int ingest_threads = 2;
  size_t max_series = 100'000;
  // A series with no sample for this long leaves the store and the exposition (0: never), so
  // that jobs coming and going do not fill max_series.
  std::chrono::nanoseconds series_ttl = std::chrono::minutes(10);
  size_t rcvbuf_bytes = 32u << 20;   // per ingest socket
  std::vector<pid_t> pids;           // --pid (repeatable)
  std::vector<std::string> cgroups;  // --cgroup (repeatable)
  // --disable-probe NAME (repeatable): probes not attached at all (--list-probes names them);
  // e.g. thp_faults, whose program runs on every page allocation of the host.
  std::vector<std::string> disabled_probes;
  // --enable-probe NAME (repeatable): a probe off by default attached (--list-probes says which
  // are: thp_faults).
  std::vector<std::string> enabled_probes;
  bool all_processes = false;  // --all
  // --rdma-sources all (default auto: collector/loader/rdma_source.h)
  bool rdma_sources_all = false;
  bool rdma_rxe_kprobes = false;  // --rdma-rxe-attach kprobe: rdma_rxe's kprobes even with fentry
  // --rdma-verbs-read nonfaulting: rdma_verbs' non-faulting completion read even where the
  // sleepable one loads
  bool rdma_verbs_nonfaulting = false;
  bool discover = false;          // --discover: find torchrun/mpirun/srun ranks on this host
  size_t discover_max_jobs = 32;  // --discover-max-jobs: more jobs are counted, not followed
  bool list_probes = false;
  bool list_metrics = false;  // print the metric catalogue as a markdown table, then exit
  bool help = false;
  bool version = false;  // --version: print it and exit
  LogLevel log_level = LogLevel::kInfo;
};

// Parses argv (argv[0] skipped) over the defaults and the --config file it names. Returns
// false with `error` set to one line naming the key or flag.
bool loadConfig(int argc, const char* const* argv, CollectorConfig& out, std::string& error);

// True for a host that binds every interface: 0.0.0.0, ::, or empty. The collector listens on
// 127.0.0.1 unless told otherwise and warns when told to listen everywhere.
bool isWildcardHost(std::string_view host);

// Parses a duration such as "5s", "500ms", "250us", "2m", "1h"; nullopt when malformed.
std::optional<std::chrono::nanoseconds> parseDuration(std::string_view s);

const char* collectorUsage();

}  // namespace bpftrain::collector::app
