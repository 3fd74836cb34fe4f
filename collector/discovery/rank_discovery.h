// Rank discovery (--discover): each collector step walks /proc (process_table.h), reads the
// environment of new processes (rank_environment.h), groups the training ranks it finds by job and
// rank, and hands them to the BPF loader, which gives each rank a target slot labelled with the
// job's real id and the rank's real number, the slot machinery hello-announced ranks use. A
// process that exits leaves its rank; a rank with no process left is released (its series then
// expire after --series-ttl). At most max_jobs jobs are followed; the rest are counted.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/discovery/discovered_rank.h"
#include "collector/discovery/process_table.h"
#include "collector/discovery/rank_environment.h"
#include "collector/window/series_store.h"

namespace bpftrain::collector::discovery {

struct DiscoveryOptions {
  std::string proc_root = "/proc";
  size_t max_jobs = 32;  // --discover-max-jobs
  // A process younger than this is looked at again each scan: between a launcher's fork and the
  // exec that gives a worker its own environment, /proc shows the launcher's.
  int64_t settle_ns = 2'000'000'000;
};

// What one scan changed, for the log.
struct DiscoveryEvent {
  enum Kind { kRankFound, kRankGone, kJobCapped } kind;
  std::string job, rank, launcher;
  size_t processes = 0;
};

class RankDiscovery {
 public:
  // `store` and `writer`: where its own metrics go (null: none, as in tests of the grouping).
  RankDiscovery(DiscoveryOptions options, window::SeriesStore* store, int writer);

  // Walks /proc once; true when ranks() changed. `events` gets what a log should say.
  bool scan(int64_t now_ns, std::vector<DiscoveryEvent>* events = nullptr);
  // The ranks followed now, sorted by job then rank.
  const std::vector<DiscoveredRank>& ranks() const { return ranks_; }
  size_t jobs() const { return admitted_.size(); }
  uint64_t jobsCapped() const { return capped_total_; }
  const DiscoveryOptions& options() const { return options_; }

 private:
  struct Tracked {
    ProcessInfo info;
    std::optional<RankIdentity> id;  // nullopt: not (yet) a rank
    bool settled = false;            // old enough that its environment is final
  };
  void look(Tracked& t, int64_t boot_ns);
  void recordMetrics(int64_t now_ns, double scan_seconds);

  DiscoveryOptions options_;
  window::SeriesStore* store_;
  int writer_;
  ProcessTable table_;
  std::unordered_map<pid_t, Tracked> watched_;  // ranks and processes not yet settled
  std::string environ_;                         // scratch
  std::vector<DiscoveredRank> ranks_;
  std::map<std::string, std::string> admitted_;  // job -> launcher, in the order jobs came
  std::vector<std::string> admission_order_;
  std::set<std::string> capped_;              // jobs refused and counted once
  std::map<std::string, size_t> gauge_jobs_;  // jobs whose ranks gauge is exported
  uint64_t capped_total_ = 0, capped_recorded_ = 0;
  window::SeriesId capped_id_ = window::kRejectedSeries;
  bool first_ = true;
};

}  // namespace bpftrain::collector::discovery
