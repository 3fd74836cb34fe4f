// RankDiscovery over a fake /proc (a directory of PID/stat and PID/environ files): ranks grouped by
// job and rank, launchers left out, children joining their rank, exits dropping ranks, the job cap
// counted once per job, and its metrics in a real series store.
#include "collector/discovery/rank_discovery.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "collector/window/series_store.h"
#include "tests/support/temp_dir.h"

namespace bpftrain::collector::discovery {
namespace {

using namespace std::string_literals;

class FakeProc {
 public:
  // `start_ticks` 0: long settled (booted long before).
  void add(pid_t pid, pid_t ppid, const std::string& environ, uint64_t start_ticks = 0) {
    const std::string dir = root.path() + "/" + std::to_string(pid);
    std::filesystem::create_directories(dir);
    // A comm with a space and a parenthesis: fields are counted from the last ')'.
    std::ofstream(dir + "/stat") << pid << " (py thon)) S " << ppid
                                 << " 1 1 0 -1 4194560 0 0 0 0 0 0 0 0 20 0 1 0 " << start_ticks
                                 << " 1000 100\n";
    std::ofstream(dir + "/environ", std::ios::binary) << environ;
  }
  void remove(pid_t pid) { std::filesystem::remove_all(root.path() + "/" + std::to_string(pid)); }
  testing::TempDir root;
};

std::string torch(int rank, int world, const std::string& run) {
  return "PATH=/bin\0RANK="s + std::to_string(rank) + "\0WORLD_SIZE="s + std::to_string(world) +
         "\0LOCAL_RANK="s + std::to_string(rank) + "\0TORCHELASTIC_RUN_ID="s + run + "\0"s;
}
std::string ompi(int rank, const std::string& job) {
  return "OMPI_COMM_WORLD_RANK="s + std::to_string(rank) + "\0OMPI_COMM_WORLD_SIZE=2\0"s +
         "OMPI_MCA_ess_base_jobid="s + job + "\0"s;
}
std::string slurmTask(int procid) {
  return "SLURM_JOB_ID=77\0SLURM_STEP_ID=0\0SLURM_PROCID="s + std::to_string(procid) +
         "\0SLURM_NTASKS=4\0"s;
}

TEST(ProcessTable, StartsAndExits) {
  FakeProc proc;
  proc.add(10, 1, "A=1\0"s);
  proc.add(11, 10, "A=1\0"s);
  ProcessTable table(proc.root.path());
  auto first = table.scan();
  ASSERT_EQ(first.started.size(), 2u);
  EXPECT_TRUE(first.exited.empty());
  for (const auto& p : first.started) {
    if (p.pid == 11) {
      EXPECT_EQ(p.ppid, 10);
    }
  }
  proc.remove(10);
  proc.add(12, 1, "A=1\0"s, 500);
  auto second = table.scan();
  ASSERT_EQ(second.started.size(), 1u);
  EXPECT_EQ(second.started[0].pid, 12);
  EXPECT_EQ(second.started[0].start_ticks, 500u);
  ASSERT_EQ(second.exited.size(), 1u);
  EXPECT_EQ(second.exited[0].pid, 10);
  EXPECT_TRUE(table.alive(second.started[0]));
  ProcessInfo reused = second.started[0];
  reused.start_ticks = 499;  // the same pid, another process
  EXPECT_FALSE(table.alive(reused));
}

TEST(RankDiscovery, TorchrunWorkersAreRanksTheAgentIsNot) {
  FakeProc proc;
  proc.add(100, 1, "PATH=/bin\0HOME=/root\0"s);  // the torchrun agent: no RANK
  proc.add(101, 100, torch(0, 2, "job-a"));
  proc.add(102, 100, torch(1, 2, "job-a"));
  proc.add(103, 101, torch(0, 2, "job-a"));  // rank 0's data loader worker
  proc.add(200, 1, "SHELL=/bin/sh\0"s);
  RankDiscovery d({proc.root.path(), 32, 2'000'000'000}, nullptr, 0);
  std::vector<DiscoveryEvent> events;
  EXPECT_TRUE(d.scan(0, &events));
  ASSERT_EQ(d.ranks().size(), 2u);
  EXPECT_EQ(d.ranks()[0], (DiscoveredRank{"job-a", "0", {101, 103}}));
  EXPECT_EQ(d.ranks()[1], (DiscoveredRank{"job-a", "1", {102}}));
  EXPECT_EQ(d.jobs(), 1u);
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].kind, DiscoveryEvent::kRankFound);
  EXPECT_EQ(events[0].launcher, "torchrun");
  EXPECT_FALSE(d.scan(1));  // nothing changed

  proc.remove(103);  // the loader worker exits: rank 0 keeps its own process
  EXPECT_TRUE(d.scan(2));
  EXPECT_EQ(d.ranks()[0].pids, std::vector<pid_t>{101});
  proc.remove(102);
  events.clear();
  EXPECT_TRUE(d.scan(3, &events));
  ASSERT_EQ(d.ranks().size(), 1u);
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, DiscoveryEvent::kRankGone);
  EXPECT_EQ(events[0].rank, "1");
  proc.remove(101);
  EXPECT_TRUE(d.scan(4));
  EXPECT_TRUE(d.ranks().empty());
  EXPECT_EQ(d.jobs(), 0u);
}

TEST(RankDiscovery, ALauncherOfAnotherKindIsNoRank) {
  FakeProc proc;
  // srun starts torchrun (the agent is an srun task); the agent's children are torch ranks.
  proc.add(300, 1, slurmTask(0));
  proc.add(301, 300, torch(0, 2, "none\0SLURM_JOB_ID=77\0SLURM_STEP_ID=0"s));
  proc.add(302, 300, torch(1, 2, "none\0SLURM_JOB_ID=77\0SLURM_STEP_ID=0"s));
  proc.add(400, 1, slurmTask(3));  // a plain srun task of the same step
  RankDiscovery d({proc.root.path(), 32, 2'000'000'000}, nullptr, 0);
  d.scan(0);
  ASSERT_EQ(d.ranks().size(), 3u);
  EXPECT_EQ(d.ranks()[0], (DiscoveredRank{"77.0", "0", {301}}));
  EXPECT_EQ(d.ranks()[1], (DiscoveredRank{"77.0", "1", {302}}));
  EXPECT_EQ(d.ranks()[2], (DiscoveredRank{"77.0", "3", {400}}));
}

TEST(RankDiscovery, YoungProcessesAreLookedAtAgainUntilTheirEnvironmentSettles) {
  FakeProc proc;
  // Just forked by the agent, not yet exec'd: the agent's environment. Started "now".
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  const uint64_t now_ticks = uint64_t(ts.tv_sec) * uint64_t(::sysconf(_SC_CLK_TCK));
  proc.add(500, 1, "PATH=/bin\0"s, now_ticks);
  RankDiscovery d({proc.root.path(), 32, 60'000'000'000}, nullptr, 0);
  d.scan(0);
  EXPECT_TRUE(d.ranks().empty());
  proc.add(500, 1, torch(0, 1, "late-exec"), now_ticks);  // the exec
  EXPECT_TRUE(d.scan(1));
  ASSERT_EQ(d.ranks().size(), 1u);
  EXPECT_EQ(d.ranks()[0].job, "late-exec");
}

TEST(RankDiscovery, JobsOverTheCapAreCountedOnceAndAdmittedWhenRoomFrees) {
  FakeProc proc;
  proc.add(600, 1, ompi(0, "111"));
  proc.add(601, 1, ompi(1, "111"));
  proc.add(700, 1, ompi(0, "222"));
  proc.add(800, 1, torch(0, 1, "third"));
  RankDiscovery d({proc.root.path(), 1, 2'000'000'000}, nullptr, 0);
  std::vector<DiscoveryEvent> events;
  d.scan(0, &events);
  EXPECT_EQ(d.jobs(), 1u);
  ASSERT_EQ(d.ranks().size(), 2u);
  EXPECT_EQ(d.ranks()[0].job, "111");  // the oldest (lowest pid) job first
  EXPECT_EQ(d.jobsCapped(), 2u);
  d.scan(1, &events);
  EXPECT_EQ(d.jobsCapped(), 2u);  // the same refused jobs are not counted again
  size_t capped = 0;
  for (const auto& e : events) capped += e.kind == DiscoveryEvent::kJobCapped;
  EXPECT_EQ(capped, 2u);
  proc.remove(600);
  proc.remove(601);
  d.scan(2);
  ASSERT_EQ(d.ranks().size(), 1u);
  EXPECT_EQ(d.ranks()[0].job, "222");
  EXPECT_EQ(d.jobsCapped(), 2u);
}

TEST(RankDiscovery, MetricsInTheStore) {
  FakeProc proc;
  proc.add(900, 1, ompi(0, "555"));
  proc.add(901, 1, ompi(1, "555"));
  proc.add(902, 1, torch(0, 1, "other"));
  window::WindowConfig wc;
  wc.series_ttl = std::chrono::seconds(10);
  auto store = window::SeriesStore::create(wc);
  RankDiscovery d({proc.root.path(), 1, 2'000'000'000}, store.get(), 0);
  const int64_t t0 = 1'000'000'000'000;
  d.scan(t0);
  auto value = [&](const std::string& name, const std::string& job, int64_t now) {
    for (const auto& s : store->snapshot(now))
      if (s.name == name && (job.empty() || (s.labels.size() == 1 && s.labels[0].second == job)))
        return s.kind == metrics::Kind::kCounter ? s.total : s.last;
    return -1.0;
  };
  EXPECT_EQ(value("bpftrain_discovery_ranks", "555", t0), 2);
  EXPECT_EQ(value("bpftrain_discovery_ranks", "other", t0), -1);  // capped: not exported
  EXPECT_EQ(value("bpftrain_discovery_jobs_capped", "", t0), 1);
  EXPECT_GT(value("bpftrain_discovery_scan_seconds", "", t0), 0);
  proc.remove(900);
  proc.remove(901);
  d.scan(t0 + 500'000'000);
  EXPECT_EQ(value("bpftrain_discovery_ranks", "555", t0 + 500'000'000), 0);
  EXPECT_EQ(value("bpftrain_discovery_ranks", "other", t0 + 500'000'000), 1);
  // The finished job's gauge expires after the TTL; the live job's stays.
  int64_t t = t0 + 500'000'000;
  for (int i = 0; i < 30; ++i) {
    t += 1'000'000'000;
    d.scan(t);
    store->expireIdle(t);
  }
  EXPECT_EQ(value("bpftrain_discovery_ranks", "555", t), -1);
  EXPECT_EQ(value("bpftrain_discovery_ranks", "other", t), 1);
}

}  // namespace
}  // namespace bpftrain::collector::discovery
