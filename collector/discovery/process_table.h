// The processes on this host, followed by polling /proc: each scan reports the processes that
// started and the ones that exited since the previous scan.
//
// Why polling, when the netlink proc connector or BPF exec/exit tracepoints report each event at
// once: the environment a rank is recognised by has to be read from /proc/PID/environ either way,
// processes that were running before the collector started need a /proc walk either way, and an
// event stream can lose events (the proc connector's ENOBUFS, a full ring buffer) and then needs
// the same walk to recover. A bounded-period walk alone is complete, needs no extra privilege
// (the proc connector wants CAP_NET_ADMIN in the initial namespaces) and costs one readdir plus a
// read of the new processes' stat and environ; process-exporter, Netdata's apps.plugin and the
// Datadog process agent follow processes the same way. The price is latency: a rank shows up
// within one period (the collector's step) of starting.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace bpftrain::collector::discovery {

struct ProcessInfo {
  pid_t pid = 0;
  pid_t ppid = 0;
  uint64_t start_ticks = 0;  // /proc/PID/stat field 22: with the pid, one process's identity
};

class ProcessTable {
 public:
  explicit ProcessTable(std::string proc_root = "/proc") : root_(std::move(proc_root)) {}

  struct Changes {
    std::vector<ProcessInfo> started;  // new since the last scan (every process on the first)
    std::vector<ProcessInfo> exited;   // gone since the last scan
  };
  // Walks /proc once, reading the stat of new pids only. A pid that exited and was reused between
  // two scans goes unnoticed here (pid_max is 4M on 64-bit hosts); callers check the processes
  // they hold with alive(). Threads are not processes here (/proc lists thread-group leaders):
  // the probes follow a process's threads by its tgid.
  Changes scan();

  // Re-reads one process's stat: false when it is gone or is no longer the same process.
  bool alive(const ProcessInfo& p) const;
  // Forgets a pid, so that the next scan reports what runs under it now as started (a caller
  // found with alive() that the pid was reused).
  void forget(pid_t pid) { known_.erase(pid); }

  const std::string& root() const { return root_; }
  size_t size() const { return known_.size(); }

 private:
  bool readStat(pid_t pid, ProcessInfo& out) const;

  std::string root_;
  std::unordered_map<pid_t, ProcessInfo> known_;
  std::vector<pid_t> seen_;  // scratch, reused across scans
};

}  // namespace bpftrain::collector::discovery
