// Runs inside the two-node guest of tools/numalab (Debian's 6.1 kernel under QEMU, CPU 0 on node 0,
// CPU 1 on node 1, NUMA balancing on): known-answer tests of the cross-node probes through
// ProbeService and the real SeriesStore, as tests/bpf/probe_service_test.cc does on one node. The
// ctest `numalab_guest` boots the guest once and runs this binary there; on a machine that is not
// such a guest every case skips saying so.
#include <gtest/gtest.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collector/ingest/sender_registry.h"
#include "collector/loader/probe_service.h"
#include "collector/window/series_store.h"
#include "common/clock.h"
#include "tests/bpf/workloads.h"

namespace bpftrain::collector::loader {
namespace {

using namespace std::chrono_literals;
using tests::bpf::Child;
using LabelMap = std::map<std::string, std::string>;

std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The guest numalab boots: two online nodes, CPU 0 on node 0 and CPU 1 on node 1.
bool inNumalabGuest(std::string& why) {
  if (readAll("/sys/devices/system/node/online").rfind("0-1", 0) != 0) {
    why = "needs two NUMA nodes: run inside tools/numalab (ctest -L numalab does)";
    return false;
  }
  if (readAll("/sys/devices/system/cpu/cpu0/node0/cpulist").empty() &&
      access("/sys/devices/system/cpu/cpu1/node1", F_OK) != 0) {
    why = "needs CPU 1 on node 1 (tools/numalab's layout)";
    return false;
  }
  if (geteuid() != 0) {
    why = "needs root to load BPF programs (the guest runs tests as root)";
    return false;
  }
  return true;
}

// Binds the calling task's future allocations to `node`. With MPOL_F_NUMA_BALANCING NUMA balancing
// still scans (hinting faults happen) but never migrates a page off the bound node.
bool bindMemoryTo(int node) {
  unsigned long mask = 1ul << node;
  return syscall(SYS_set_mempolicy, MPOL_BIND | MPOL_F_NUMA_BALANCING, &mask,
                 sizeof(mask) * 8 + 1) == 0;
}
bool defaultMemoryPolicy() { return syscall(SYS_set_mempolicy, MPOL_DEFAULT, nullptr, 0) == 0; }

// Resident pages of process `pid` per node, from /proc/PID/numa_maps (N<node>=<pages> fields).
std::map<int, long> pagesPerNode(pid_t pid) {
  std::map<int, long> pages;
  std::istringstream maps(readAll("/proc/" + std::to_string(pid) + "/numa_maps"));
  for (std::string word; maps >> word;) {
    int node = 0;
    long n = 0;
    if (std::sscanf(word.c_str(), "N%d=%ld", &node, &n) == 2) pages[node] += n;
  }
  return pages;
}

// Training ranks are multi-threaded. For a single-threaded process the kernel does not mark pages
// already on the node it runs on (change_pte_range, mm_users == 1), so a one-thread rank would see
// no local hinting faults at all. A second thread that only sleeps makes the mm shared.
void addIdleThread() {
  std::thread([] {
    for (;;) pause();
  }).detach();
}

// A buffer the child allocates in setup and then sweeps, one write per page, for `seconds`.
struct Sweep {
  static constexpr size_t kBytes = 32u << 20;
  char* buffer = nullptr;
  bool allocate() {
    void* p = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return false;
    madvise(p, kBytes, MADV_NOHUGEPAGE);  // 4 KiB pages: one hinting fault per page touched
    buffer = static_cast<char*>(p);
    for (size_t i = 0; i < kBytes; i += 4096) buffer[i] = 1;
    return true;
  }
  int64_t run(std::chrono::seconds seconds) const {
    const auto end = std::chrono::steady_clock::now() + seconds;
    int64_t passes = 0;
    while (std::chrono::steady_clock::now() < end) {
      for (size_t i = 0; i < kBytes; i += 4096) {
        volatile char* byte = buffer + i;
        *byte = static_cast<char>(*byte + 1);
      }
      ++passes;
    }
    return passes;
  }
};

long vmstat(const std::string& name) {
  std::istringstream in(readAll("/proc/vmstat"));
  std::string key;
  long value = 0;
  while (in >> key >> value)
    if (key == name) return value;
  return -1;
}

class NumalabGuestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!inNumalabGuest(why)) GTEST_SKIP() << why;
    window::WindowConfig config;
    config.window = 120s;  // nothing leaves the window during a test
    config.step = 1s;
    store_ = window::SeriesStore::create(config);
  }

  std::unique_ptr<ProbeService> start(ProbeOptions options) {
    std::string error;
    auto service = ProbeService::create(options, *store_, 0, error);
    EXPECT_NE(service, nullptr) << error;
    if (service) service->poll(registry_, monotonicNowNs());
    return service;
  }

  static bool matches(const window::SeriesSnapshot& s, const std::string& name,
                      const LabelMap& want) {
    if (s.name != name) return false;
    for (const auto& [k, v] : want) {
      auto it = std::find_if(s.labels.begin(), s.labels.end(),
                             [&k = k](auto& l) { return l.first == k; });
      if (it == s.labels.end() || it->second != v) return false;
    }
    return true;
  }
  double total(const std::string& name, const LabelMap& labels) const {
    double sum = 0;
    for (const auto& s : store_->snapshot(monotonicNowNs()))
      if (matches(s, name, labels)) sum += s.kind == window::SeriesKind::kGauge ? s.last : s.total;
    return sum;
  }
  std::optional<window::SeriesSnapshot> series(const std::string& name,
                                               const LabelMap& labels) const {
    for (auto& s : store_->snapshot(monotonicNowNs()))
      if (matches(s, name, labels)) return s;
    return std::nullopt;
  }

  std::unique_ptr<window::SeriesStore> store_;
  ingest::SenderRegistry registry_;
};

// What Debian's 6.1 offers, probe by probe: the CO-RE objects built against this build host's
// kernel load and attach there, except where 6.1 lacks the event (said in the reason).
TEST_F(NumalabGuestTest, ProbesLoadAndAttachOnThisKernel) {
  const std::vector<ProbeStatus> all = ProbeService::listProbes();
  std::map<std::string, const ProbeStatus*> by_name;
  for (const auto& s : all) {
    by_name[s.name] = &s;
    std::printf("probe %-20s %s %s\n", s.name.c_str(), s.up ? "up  " : "DOWN", s.reason.c_str());
  }
  for (const char* up : {"migrations", "numa_moves", "page_migrations", "tlb_flush", "page_faults",
                         "thp_faults", "numa_hint_faults", "numa_fault_locality", "rdma_usdt"}) {
    ASSERT_TRUE(by_name.count(up)) << up << " is not listed";
    EXPECT_TRUE(by_name[up]->up) << up << ": " << by_name[up]->reason;
  }
  // 6.1 has no tcp:tcp_sendmsg_locked (it came in 6.2): the tcp probe is down and says so.
  ASSERT_TRUE(by_name.count("tcp"));
  if (!by_name["tcp"]->up) {
    EXPECT_NE(by_name["tcp"]->reason.find("tcp_sendmsg_locked"), std::string::npos)
        << by_name["tcp"]->reason;
  }
  // QEMU's TCG emulates no PMU: the PMU probes are down with a reason, never replaced.
  for (const char* pmu : {"dtlb_misses", "itlb_misses", "node_load_misses", "node_loads"}) {
    ASSERT_TRUE(by_name.count(pmu));
    if (!by_name[pmu]->up) {
      EXPECT_FALSE(by_name[pmu]->reason.empty()) << pmu;
    }
  }
}

// Each forced move between CPU 0 (node 0) and CPU 1 (node 1) is one sched_migrate_task that
// crosses nodes: scope="node" counts every one, as scope="cpu" does on one node.
TEST_F(NumalabGuestTest, NodeScopeMigrationsCountEachCrossNodeMove) {
  constexpr int64_t kMoves = 100;
  auto pin0 = [] { tests::bpf::pinSelf(0); };
  auto work = [] { return tests::bpf::migrateSelf(kMoves); };
  Child target(pin0, work), bystander(pin0, work);
  ASSERT_TRUE(target.ready(10s) && bystander.ready(10s));
  ProbeOptions options;
  options.pids = {target.pid()};
  auto service = start(options);
  ASSERT_NE(service, nullptr);
  target.go();
  bystander.go();
  int64_t moved = 0, bystander_moved = 0;
  ASSERT_TRUE(target.result(moved, 60s));
  ASSERT_TRUE(bystander.result(bystander_moved, 60s));
  ASSERT_EQ(moved, kMoves);
  ASSERT_EQ(bystander_moved, kMoves);
  service->poll(registry_, monotonicNowNs());
  const double node = total("bpftrain_migrations", {{"job", "manual"}, {"scope", "node"}});
  const double cpu = total("bpftrain_migrations", {{"job", "manual"}, {"scope", "cpu"}});
  const double llc = total("bpftrain_migrations", {{"job", "manual"}, {"scope", "llc"}});
  std::printf("migrations of %ld forced moves: cpu=%.0f llc=%.0f node=%.0f\n", long(kMoves), cpu,
              llc, node);
  // Pinned throughout; the only slack is a migration while the child exits: [K, K + 2].
  EXPECT_GE(node, kMoves);
  EXPECT_LE(node, kMoves + 2);
  // Each migration is counted once, under the widest boundary it crosses; with one CPU per node
  // every move crosses a node. The bystander added nothing.
  EXPECT_EQ(cpu, 0);
  EXPECT_EQ(llc, 0);
  EXPECT_EQ(total("bpftrain_migrations", {{"scope", "node"}}), node);
}

// Three ranks on CPU 0 (node 0), NUMA balancing on:
//  rank 0 sweeps memory bound to node 1 (scanned, never migrated): remote hinting faults;
//  rank 1 sweeps memory bound to node 0: local ones, and ≥ 10x fewer remote ones than rank 0;
//  rank 2 sweeps memory first placed on node 1 under the default policy: NUMA balancing moves
//  it to node 0, counted as page_migrations{reason="numa_misplaced"}.
// The probe's totals are checked against the kernel's own /proc/vmstat counts, and the locality
// gauge against the ranks' placement.
TEST_F(NumalabGuestTest, HintFaultsRemoteVersusLocal) {
  constexpr auto kSweep = 12s;
  Sweep remote_mem, local_mem, misplaced_mem;
  auto body = [&](const Sweep& s) { return [&s, kSweep] { return s.run(kSweep); }; };
  Child remote(
      [&] {
        tests::bpf::pinSelf(0);
        addIdleThread();
        if (bindMemoryTo(1)) remote_mem.allocate();
      },
      body(remote_mem));
  Child local(
      [&] {
        tests::bpf::pinSelf(0);
        addIdleThread();
        if (bindMemoryTo(0)) local_mem.allocate();
      },
      body(local_mem));
  Child misplaced(
      [&] {
        tests::bpf::pinSelf(0);
        addIdleThread();
        // Placed on node 1, then the default policy: nothing holds the pages there.
        if (bindMemoryTo(1) && misplaced_mem.allocate()) defaultMemoryPolicy();
      },
      body(misplaced_mem));
  ASSERT_TRUE(remote.ready(20s) && local.ready(20s) && misplaced.ready(20s));
  const auto before = pagesPerNode(remote.pid()), local_before = pagesPerNode(local.pid()),
             misplaced_before = pagesPerNode(misplaced.pid());
  ASSERT_GT(before.count(1) ? before.at(1) : 0, 8000) << "remote rank's memory not on node 1";
  ASSERT_GT(local_before.count(0) ? local_before.at(0) : 0, 8000) << "local rank's memory";
  ASSERT_GT(misplaced_before.count(1) ? misplaced_before.at(1) : 0, 8000) << "misplaced rank's";

  ProbeOptions options;
  options.pids = {remote.pid(), local.pid(), misplaced.pid()};
  auto service = start(options);
  ASSERT_NE(service, nullptr);
  const long faults0 = vmstat("numa_hint_faults"), local0 = vmstat("numa_hint_faults_local");
  remote.go();
  local.go();
  misplaced.go();
  // Poll as the collector does, so that the locality gauge has samples during the run.
  const auto end = std::chrono::steady_clock::now() + kSweep + 1s;
  while (std::chrono::steady_clock::now() < end) {
    std::this_thread::sleep_for(500ms);
    service->poll(registry_, monotonicNowNs());
  }
  int64_t passes[3] = {};
  ASSERT_TRUE(remote.result(passes[0], 60s));
  ASSERT_TRUE(local.result(passes[1], 60s));
  ASSERT_TRUE(misplaced.result(passes[2], 60s));
  service->poll(registry_, monotonicNowNs());
  const long faults = vmstat("numa_hint_faults") - faults0,
             faults_local = vmstat("numa_hint_faults_local") - local0;
  const auto after = pagesPerNode(remote.pid()), misplaced_after = pagesPerNode(misplaced.pid());

  auto faultsOf = [&](int rank, const char* locality) {
    return total("bpftrain_numa_hint_faults",
                 {{"job", "manual"}, {"rank", std::to_string(rank)}, {"locality", locality}});
  };
  auto gauge = [&](int rank) {
    return series("bpftrain_numa_fault_locality",
                  {{"job", "manual"}, {"rank", std::to_string(rank)}});
  };
  const double r_remote = faultsOf(0, "remote"), r_local = faultsOf(0, "local");
  const double l_remote = faultsOf(1, "remote"), l_local = faultsOf(1, "local");
  const double m_remote = faultsOf(2, "remote"), m_local = faultsOf(2, "local");
  const double misplaced_pages =
      total("bpftrain_page_migrations", {{"rank", "2"}, {"reason", "numa_misplaced"}});
  std::printf("sweeps (passes): remote %ld, local %ld, misplaced %ld\n", long(passes[0]),
              long(passes[1]), long(passes[2]));
  std::printf(
      "hint faults: bound remote: remote=%.0f local=%.0f; bound local: remote=%.0f "
      "local=%.0f; misplaced: remote=%.0f local=%.0f\n",
      r_remote, r_local, l_remote, l_local, m_remote, m_local);
  std::printf("vmstat over the run: numa_hint_faults=%ld numa_hint_faults_local=%ld\n", faults,
              faults_local);
  std::printf(
      "misplaced rank: page_migrations{numa_misplaced}=%.0f, node pages before N0=%ld "
      "N1=%ld after N0=%ld N1=%ld\n",
      misplaced_pages, misplaced_before.count(0) ? misplaced_before.at(0) : 0,
      misplaced_before.count(1) ? misplaced_before.at(1) : 0,
      misplaced_after.count(0) ? misplaced_after.at(0) : 0,
      misplaced_after.count(1) ? misplaced_after.at(1) : 0);
  for (int rank = 0; rank < 3; ++rank)
    if (auto g = gauge(rank))
      std::printf(
          "numa_fault_locality rank %d: min %.3f mean %.3f max %.3f last %.3f (%lu samples)\n",
          rank, g->min, g->count ? g->sum / double(g->count) : 0.0, g->max, g->last,
          static_cast<unsigned long>(g->count));
  for (int rank = 0; rank < 3; ++rank)
    std::printf(
        "numa task moves rank %d: move %.0f swap %.0f stick %.0f\n", rank,
        total("bpftrain_numa_task_moves", {{"rank", std::to_string(rank)}, {"kind", "move"}}),
        total("bpftrain_numa_task_moves", {{"rank", std::to_string(rank)}, {"kind", "swap"}}),
        total("bpftrain_numa_task_moves", {{"rank", std::to_string(rank)}, {"kind", "stick"}}));
  if (l_remote > 0)
    std::printf("remote-fault ratio bound remote / bound local: %.1f\n", r_remote / l_remote);

  // The remote rank's memory stayed on node 1 and faulted remotely; the local rank's locally.
  EXPECT_GT(after.count(1) ? after.at(1) : 0, 8000);
  EXPECT_GE(r_remote, 1000) << "the remote rank saw few remote hinting faults";
  EXPECT_GE(l_local, 1000) << "the local rank saw few local hinting faults";
  EXPECT_GE(r_remote, 10 * std::max(l_remote, 1.0));
  EXPECT_GE(r_remote, 10 * std::max(r_local, 1.0));
  // The targets' faults are a part of everything the kernel counted (the test process and
  // kernel threads fault too).
  EXPECT_LE(r_remote + r_local + l_remote + l_local + m_remote + m_local, double(faults));
  EXPECT_LE(r_local + l_local + m_local, double(faults_local));
  // ... and nearly all of it: nothing else in the guest sweeps memory.
  EXPECT_GE(r_remote + r_local + l_remote + l_local + m_remote + m_local, 0.9 * double(faults));
  // Memory chasing its task: the misplaced rank's pages moved to node 0, and were counted.
  EXPECT_GE(m_remote, 1);
  EXPECT_GE(misplaced_pages, 1000);
  // NUMA balancing tried to take the remote rank to its memory (pinned, it cannot go).
  EXPECT_GE(total("bpftrain_numa_task_moves", {{"rank", "0"}}), 1);
  // The kernel's own per-task statistics tell the same: remote low, local high.
  auto g_remote = gauge(0), g_local = gauge(1);
  ASSERT_TRUE(g_remote && g_local) << "no locality gauge for the remote or local rank";
  // The first samples rest on a handful of faults (stack, the idle thread): judge the last one.
  EXPECT_LE(g_remote->last, 0.1);
  EXPECT_GE(g_local->last, 0.9);
}

}  // namespace
}  // namespace bpftrain::collector::loader
