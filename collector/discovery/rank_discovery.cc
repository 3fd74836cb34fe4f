#include "collector/discovery/rank_discovery.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <unordered_set>
#include <utility>

#include "common/clock.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::discovery {
namespace {

int64_t bootNowNs() {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

RankDiscovery::RankDiscovery(DiscoveryOptions options, window::SeriesStore* store, int writer)
    : options_(std::move(options)), store_(store), writer_(writer), table_(options_.proc_root) {}

void RankDiscovery::look(Tracked& t, int64_t boot_ns) {
  // /proc/PID/stat's start time is in clock ticks since boot (CLOCK_BOOTTIME).
  static const int64_t kTickNs = 1'000'000'000 / std::max<long>(::sysconf(_SC_CLK_TCK), 1);
  const int64_t age_ns = boot_ns - int64_t(t.info.start_ticks) * kTickNs;
  // Decided before reading: a process that was old enough before the read cannot exec into a
  // new environment unseen.
  t.settled = age_ns >= options_.settle_ns;
  if (readEnviron(table_.root(), t.info.pid, environ_))
    t.id = identifyRank(environ_);
  else
    t.id.reset();  // gone, or a kernel thread
}

bool RankDiscovery::scan(int64_t now_ns, std::vector<DiscoveryEvent>* events) {
  const int64_t started_ns = monotonicNowNs();
  const int64_t boot_ns = bootNowNs();
  ProcessTable::Changes changes = table_.scan();
  for (const ProcessInfo& gone : changes.exited) watched_.erase(gone.pid);
  // Processes seen before: re-read the young ones, drop ranks whose pid now names another process.
  for (auto it = watched_.begin(); it != watched_.end();) {
    Tracked& t = it->second;
    if (t.id && t.settled && !table_.alive(t.info)) {
      table_.forget(it->first);  // whatever has the pid now is looked at next scan
      it = watched_.erase(it);
      continue;
    }
    if (!t.settled) look(t, boot_ns);
    it = (t.id || !t.settled) ? std::next(it) : watched_.erase(it);
  }
  for (const ProcessInfo& info : changes.started) {
    Tracked t{info, std::nullopt, false};
    look(t, boot_ns);
    if (t.id || !t.settled) watched_.emplace(info.pid, std::move(t));
  }

  // A process whose child is a rank of another launcher is that rank's launcher (torchrun's agent
  // under srun, Open MPI's orted under Slurm), not a rank itself. A child of the same launcher
  // and rank (a data loader worker) inherited the rank's environment and joins its rank.
  std::unordered_set<pid_t> launchers;
  for (const auto& [pid, t] : watched_) {
    if (!t.id) continue;
    auto parent = watched_.find(t.info.ppid);
    if (parent != watched_.end() && parent->second.id &&
        parent->second.id->launcher != t.id->launcher)
      launchers.insert(t.info.ppid);
  }
  std::map<std::pair<std::string, uint32_t>, DiscoveredRank> by_rank;
  std::map<std::string, std::pair<pid_t, std::string>> present;  // job -> (lowest pid, launcher)
  for (const auto& [pid, t] : watched_) {
    if (!t.id || launchers.count(pid)) continue;
    DiscoveredRank& r = by_rank[{t.id->job, t.id->rank}];
    r.job = t.id->job;
    r.rank = std::to_string(t.id->rank);
    r.pids.push_back(pid);
    auto [job, inserted] = present.try_emplace(t.id->job, pid, t.id->launcher);
    if (!inserted && pid < job->second.first) job->second = {pid, t.id->launcher};
  }

  // Admission: jobs already followed stay; new ones come in the order they started (lowest pid
  // first as a stand-in) while there is room under max_jobs.
  std::vector<std::string> order;
  for (const std::string& job : admission_order_)
    if (present.count(job)) order.push_back(job);
  std::vector<std::pair<pid_t, std::string>> fresh;
  for (const auto& [job, first] : present)
    if (std::find(order.begin(), order.end(), job) == order.end())
      fresh.emplace_back(first.first, job);
  std::sort(fresh.begin(), fresh.end());
  for (const auto& [pid, job] : fresh) {
    if (order.size() < options_.max_jobs) {
      order.push_back(job);
      capped_.erase(job);
      continue;
    }
    if (capped_.insert(job).second) {
      ++capped_total_;
      if (events) events->push_back({DiscoveryEvent::kJobCapped, job, "", present[job].second, 0});
    }
  }
  for (auto it = capped_.begin(); it != capped_.end();)
    it = present.count(*it) ? std::next(it) : capped_.erase(it);
  admission_order_ = order;
  admitted_.clear();
  for (const std::string& job : order) admitted_[job] = present[job].second;

  std::vector<DiscoveredRank> next;
  for (auto& [key, rank] : by_rank) {
    if (!admitted_.count(rank.job)) continue;
    std::sort(rank.pids.begin(), rank.pids.end());
    next.push_back(std::move(rank));
  }
  if (events) {
    auto sameRank = [](const DiscoveredRank& a, const DiscoveredRank& b) {
      return a.job == b.job && a.rank == b.rank;
    };
    for (const DiscoveredRank& r : next)
      if (std::none_of(ranks_.begin(), ranks_.end(), [&](auto& o) { return sameRank(o, r); }))
        events->push_back(
            {DiscoveryEvent::kRankFound, r.job, r.rank, admitted_[r.job], r.pids.size()});
    for (const DiscoveredRank& r : ranks_)
      if (std::none_of(next.begin(), next.end(), [&](auto& o) { return sameRank(o, r); }))
        events->push_back({DiscoveryEvent::kRankGone, r.job, r.rank, "", r.pids.size()});
  }
  const bool changed = next != ranks_ || first_;
  ranks_ = std::move(next);
  first_ = false;
  recordMetrics(now_ns, double(monotonicNowNs() - started_ns) * 1e-9);
  return changed;
}

void RankDiscovery::recordMetrics(int64_t now_ns, double scan_seconds) {
  if (!store_) return;
  std::map<std::string, size_t> counts;
  for (const auto& [job, launcher] : admitted_) counts[job] = 0;
  for (const DiscoveredRank& r : ranks_) ++counts[r.job];
  // A job that left reads 0 once, then its series expires like the ranks' (--series-ttl).
  for (const auto& [job, n] : gauge_jobs_)
    if (!counts.count(job)) counts[job] = 0;
  for (const auto& [job, n] : counts) {
    const window::Label label{"job", job};
    // Looked up each scan (a handful of jobs), so an expired id is never held.
    const window::SeriesId id =
        window::lookupMetric(*store_, metrics::kDiscoveryRanks, std::span(&label, 1));
    if (id == window::kRejectedSeries) continue;
    store_->setExpires(id, true);
    store_->record(writer_, id, double(n), now_ns);
  }
  gauge_jobs_.clear();
  for (const auto& [job, launcher] : admitted_) gauge_jobs_[job] = 0;

  if (capped_id_ == window::kRejectedSeries)
    capped_id_ = window::lookupMetric(*store_, metrics::kDiscoveryJobsCapped, {});
  store_->record(writer_, capped_id_, double(capped_total_ - capped_recorded_), now_ns);
  capped_recorded_ = capped_total_;
  const window::SeriesId scan_id =
      window::lookupMetric(*store_, metrics::kDiscoveryScanSeconds, {});
  store_->record(writer_, scan_id, scan_seconds, now_ns);
}

}  // namespace bpftrain::collector::discovery
