// bpftrain-collector --discover against real jobs it did not launch: a PyTorch DDP job (Gloo,
// 2 workers, `python3 -m torch.distributed.run`) and an `mpirun -np 2` job run at once. Each rank
// must appear under its job's real id and its real rank (the ids the jobs themselves read from
// their launchers) with its migrations, TLB flushes and TCP samples; the torchrun agent and
// mpirun are no ranks; once the jobs exit their ranks are dropped and their series expire.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "tests/support/catalogue_check.h"
#include "tests/support/collector_process.h"
#include "tests/support/requirements.h"
#include "tests/support/temp_dir.h"

namespace bpftrain::testing {
namespace {

using namespace std::chrono_literals;
using Metrics = CollectorProcess::Metrics;

struct Rank {
  std::string job;
  int rank = -1;
};

std::string sourcePath(const std::string& rel) {
  const char* src = std::getenv("BPFTRAIN_SOURCE_DIR");
  return std::string(src ? src : ".") + "/" + rel;
}

// "RANK JOB PID" as job_churn.py's write_identity() leaves it.
bool readRank(const std::string& path, Rank& out) {
  std::ifstream in(path);
  int pid = 0;
  return bool(in >> out.rank >> out.job >> pid);
}

// The sum of every series of `name` whose labels include all of `want` (name{...} keys).
double sumOf(const Metrics& m, const std::string& name, const std::vector<std::string>& want,
             size_t* series = nullptr) {
  double sum = 0;
  size_t n = 0;
  for (const auto& [key, value] : m) {
    if (key.rfind(name + "{", 0) != 0) continue;
    bool all = true;
    for (const auto& w : want) all = all && key.find(w) != std::string::npos;
    if (!all) continue;
    sum += value;
    ++n;
  }
  if (series) *series = n;
  return sum;
}

std::string label(const char* name, const std::string& value) {
  return std::string(name) + "=\"" + value + "\"";
}

TEST(DiscoveryE2e, TorchrunAndMpirunRanksFoundLabelledAndDropped) {
  BPFTRAIN_REQUIRE_ROOT("the BPF probes that count the ranks' signals");
  BPFTRAIN_REQUIRE_TOOL("mpirun");
  // Debian's python3-torch is built for Debian's python3, not whatever python3 PATH finds first.
  if (::access("/usr/lib/python3/dist-packages/torch/__init__.py", R_OK) != 0)
    GTEST_FAIL() << "Debian's python3-torch is not installed: run tools/setup";
  const auto started = std::chrono::steady_clock::now();
  TempDir out("bpftrain-discovery");
  ASSERT_FALSE(out.path().empty());

  // Series expire 1 s after their last sample (expiry scans every step): drops show in seconds.
  // --user nobody: as an installed collector runs (its bpftrain user), not root, so the ranks'
  // /proc/PID/environ (0400, root's here) is read with the capabilities the drop keeps.
  CollectorProcess collector(
      {"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--discover", "--series-ttl", "1s",
       "--window", "2s", "--step", "250ms", "--user", "nobody"},
      20s);
  ASSERT_GT(collector.metrics_port, 0) << collector.proc->err;
  ASSERT_TRUE(collector.proc->waitFor("rank discovery on", 5s)) << collector.proc->err;

  // Gloo over loopback only, whatever the host name resolves to.
  ::setenv("GLOO_SOCKET_IFNAME", "lo", 1);
  // --standalone: a free rendezvous port and a fresh run id (the job's id). Debian's torch 1.13
  // under Python 3.11 cannot parse --redirects/--tee 0 or 3 (enum.Flag iteration changed), so
  // both name a single stream.
  ChildProcess torchrun({"/usr/bin/python3", "-m", "torch.distributed.run", "--standalone",
                         "--nproc_per_node", "2", "--redirects", "2", "--tee", "1", "--log_dir",
                         out.path() + "/torchrun-logs",
                         sourcePath("tests/collector/discovery/ddp_job.py"), "--out", out.path()});
  // --bind-to none: Open MPI binds each of 2 ranks to one core, and the job moves itself
  // between CPUs to cause migrations.
  ChildProcess mpirun({"/usr/bin/mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to",
                       "none", "-np", "2", "/usr/bin/python3",
                       sourcePath("tests/collector/discovery/mpi_job.py"), "--out", out.path()});
  ::unsetenv("GLOO_SOCKET_IFNAME");

  // Who the ranks are, in their own words (the ids they read from their launchers).
  std::vector<Rank> ranks(4);
  const char* files[] = {"torch-rank0", "torch-rank1", "mpi-rank0", "mpi-rank1"};
  const auto rank_deadline = std::chrono::steady_clock::now() + 40s;
  for (size_t i = 0; i < 4; ++i)
    while (!readRank(out.path() + "/" + files[i], ranks[i]) &&
           std::chrono::steady_clock::now() < rank_deadline) {
      // Reading the launchers' output meanwhile also waits (50 ms each) without a bare sleep.
      torchrun.readUntil([] { return false; }, 50ms);
      mpirun.readUntil([] { return false; }, 50ms);
    }
  for (size_t i = 0; i < 4; ++i)
    ASSERT_EQ(ranks[i].rank, int(i % 2))
        << files[i] << " never written\ntorchrun: " << torchrun.out << torchrun.err
        << "\nmpirun: " << mpirun.out << mpirun.err;
  const std::string torch_job = ranks[0].job, mpi_job = ranks[2].job;
  ASSERT_EQ(ranks[1].job, torch_job);
  ASSERT_EQ(ranks[3].job, mpi_job);
  ASSERT_NE(torch_job, mpi_job);

  auto everySignal = [&](const Metrics& m) {
    for (const Rank& r : ranks) {
      const std::vector<std::string> who = {label("job", r.job),
                                            label("rank", std::to_string(r.rank))};
      std::vector<std::string> cpu = who, tcp = who;
      cpu.push_back(label("scope", "cpu"));
      tcp.push_back(label("transport", "tcp"));
      if (sumOf(m, "bpftrain_migrations_total", cpu) <= 0) return false;
      if (sumOf(m, "bpftrain_tlb_flushes_total", who) <= 0) return false;
      if (sumOf(m, "bpftrain_transport_samples_total", tcp) <= 0) return false;
    }
    return sumOf(m, "bpftrain_discovery_ranks", {label("job", torch_job)}) == 2 &&
           sumOf(m, "bpftrain_discovery_ranks", {label("job", mpi_job)}) == 2;
  };
  const Metrics live = collector.scrapeUntil(everySignal, 30s);
  std::string dump;
  for (const auto& [k, v] : live)
    if (k.find("discovery") != std::string::npos || k.find(torch_job) != std::string::npos ||
        k.find(mpi_job) != std::string::npos)
      dump += k + " " + std::to_string(v) + "\n";
  ASSERT_TRUE(everySignal(live)) << dump << collector.proc->err;
  // Only the ranks: no series of these jobs under another rank (the agent, mpirun, a pid).
  for (const auto& [key, value] : live) {
    for (const std::string& job : {torch_job, mpi_job}) {
      if (key.find(label("job", job)) == std::string::npos) continue;
      if (key.rfind("bpftrain_discovery_ranks{", 0) == 0) continue;
      EXPECT_TRUE(key.find(label("rank", "0")) != std::string::npos ||
                  key.find(label("rank", "1")) != std::string::npos)
          << key;
    }
  }
  for (const std::string& problem : catalogueMismatches(live)) ADD_FAILURE() << problem;
  // The log names each rank found (stderr is read as it is waited on).
  EXPECT_TRUE(collector.proc->waitFor("job " + torch_job + " rank 1 found (torchrun", 5s))
      << collector.proc->err;
  EXPECT_TRUE(collector.proc->waitFor("job " + mpi_job + " rank 0 found (mpirun", 5s))
      << collector.proc->err;

  // Both jobs stop; their ranks leave and their series expire.
  std::ofstream(out.path() + "/stop") << "stop\n";
  auto torch_status = torchrun.wait(30s);
  auto mpi_status = mpirun.wait(30s);
  ASSERT_TRUE(torch_status && WIFEXITED(*torch_status) && WEXITSTATUS(*torch_status) == 0)
      << torchrun.out << torchrun.err;
  ASSERT_TRUE(mpi_status && WIFEXITED(*mpi_status) && WEXITSTATUS(*mpi_status) == 0)
      << mpirun.out << mpirun.err;
  auto dropped = [&](const Metrics& m) {
    for (const std::string& job : {torch_job, mpi_job}) {
      size_t n = 0;
      for (const char* name : {"bpftrain_migrations_total", "bpftrain_tlb_flushes_total",
                               "bpftrain_transport_samples_total"}) {
        sumOf(m, name, {label("job", job)}, &n);
        if (n > 0) return false;
      }
      if (sumOf(m, "bpftrain_discovery_ranks", {label("job", job)}, &n) != 0) return false;
    }
    return true;
  };
  const Metrics after = collector.scrapeUntil(dropped, 15s);
  EXPECT_TRUE(dropped(after)) << collector.proc->err;
  EXPECT_TRUE(collector.proc->waitFor("job " + mpi_job + " rank 1 gone", 5s))
      << collector.proc->err;
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("discovery e2e: both jobs found, labelled and dropped in %.1f s\n", seconds);
  RecordProperty("seconds", std::to_string(seconds));
}

}  // namespace
}  // namespace bpftrain::testing
