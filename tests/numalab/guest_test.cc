// Runs inside the two-node guest of tools/numalab (Debian's 6.1 kernel under QEMU, CPU 0 on node 0,
// CPU 1 on node 1, NUMA balancing on): known-answer tests of the cross-node probes through
// ProbeService and the real SeriesStore, as tests/bpf/probe_service_test.cc does on one node. The
// ctest `numalab_guest` boots the guest once and runs this binary there; on a machine that is not
// such a guest every case skips saying so.
#include <dirent.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <linux/capability.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <spawn.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collector/ingest/sender_registry.h"
#include "collector/loader/probe_service.h"
#include "collector/window/series_store.h"
#include "common/clock.h"
#include "tests/bpf/workloads.h"
#include "tests/support/child_process.h"
#include "tests/support/requirements.h"

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

// Anonymous resident pages (heap, model and gradient buffers) per node; file pages (the binaries
// and libraries in the guest's initramfs) are where the page cache put them and follow no policy.
// `bound_to`: only mappings whose policy (numa_maps' second field) binds them to that node.
std::map<int, long> anonPagesPerNode(pid_t pid, int bound_to = -1) {
  std::map<int, long> pages;
  std::istringstream maps(readAll("/proc/" + std::to_string(pid) + "/numa_maps"));
  for (std::string line; std::getline(maps, line);) {
    if (line.find(" anon=") == std::string::npos) continue;
    std::istringstream words(line);
    std::string address, policy;
    words >> address >> policy;
    if (bound_to >= 0 && policy != "bind:" + std::to_string(bound_to) &&
        policy.rfind("bind=static:" + std::to_string(bound_to), 0) != 0)
      continue;
    for (std::string word; words >> word;) {
      int node = 0;
      long n = 0;
      if (std::sscanf(word.c_str(), "N%d=%ld", &node, &n) == 2) pages[node] += n;
    }
  }
  return pages;
}

// The launcher's rank processes: rank -> pid, from /proc/PID/task/PID/children and each child's
// `--rank R` argument.
std::map<int, pid_t> rankPids(pid_t launcher) {
  std::map<int, pid_t> ranks;
  const std::string l = std::to_string(launcher);
  std::istringstream children(readAll("/proc/" + l + "/task/" + l + "/children"));
  for (pid_t child; children >> child;) {
    std::string cmdline = readAll("/proc/" + std::to_string(child) + "/cmdline");
    std::vector<std::string> args;
    for (size_t at = 0; at < cmdline.size();) {
      const size_t end = cmdline.find('\0', at);
      args.push_back(cmdline.substr(at, end - at));
      at = end == std::string::npos ? cmdline.size() : end + 1;
    }
    for (size_t i = 0; i + 1 < args.size(); ++i)
      if (args[i] == "--rank") ranks[std::stoi(args[i + 1])] = child;
  }
  return ranks;
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

// A collector given only CAP_BPF and CAP_PERFMON (setcap cap_bpf,cap_perfmon+ep) by a user who
// is not root: which probes come up. Runs on any machine as root (not only in the guest), so the
// README's portability matrix has the same facts for this host's kernel.
TEST(CapabilitiesOnly, ProbesWithCapBpfAndCapPerfmonAsNobody) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to hand a child exactly two capabilities";
  int out[2];
  ASSERT_EQ(pipe(out), 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(out[0]);
    __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[2] = {};
    // CAP_PERFMON (38) and CAP_BPF (39) live in the second 32-bit word.
    data[1].effective = data[1].permitted = (1u << (CAP_PERFMON - 32)) | (1u << (CAP_BPF - 32));
    if (prctl(PR_SET_KEEPCAPS, 1) != 0 || setgroups(0, nullptr) != 0 || setgid(65534) != 0 ||
        setuid(65534) != 0 || syscall(SYS_capset, &header, data) != 0)
      _exit(3);
    std::string text;
    for (const auto& s : ProbeService::listProbes())
      text += s.name + (s.up ? " up" : " DOWN ") + s.reason + "\n";
    if (write(out[1], text.data(), text.size()) != ssize_t(text.size())) _exit(4);
    _exit(0);
  }
  close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = read(out[0], buf, sizeof(buf))) > 0;) text.append(buf, size_t(n));
  close(out[0]);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  std::istringstream lines(text);
  size_t listed = 0;
  for (std::string line; std::getline(lines, line); ++listed) {
    std::printf("caps-only probe %s\n", line.c_str());
    // A probe that is down says why.
    if (line.find(" DOWN ") != std::string::npos) {
      EXPECT_GT(line.size(), line.find(" DOWN ") + 6) << line;
    }
  }
  EXPECT_EQ(listed, ProbeService::listProbes().size());
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

// bpftrain-train --ranks 2 --pin numa binds rank r's threads to node r's CPUs and its model and
// gradient buffers to node r (hwloc_set_area_membind, BIND + STRICT + MIGRATE; docs/trainer.md):
// those buffers' pages are all on node r. The rank's other anonymous pages (heap, dataset, Gloo's
// buffers, stacks) and the copies it made of its libraries' data and RELRO pages are moved there on
// the switch, and new ones prefer it (pinner.cc, copied_pages.cc): >= 95% of all its anonymous
// pages (64-99% before the anonymous mappings moved, 93.4-100% before the copied pages did, 100.0%
// in 5 of 5 runs since). The same run with --pin none is measured alongside and binds nothing.
TEST_F(NumalabGuestTest, PinNumaKeepsEachRanksBuffersOnItsNode) {
  const char* train = "/bin/bpftrain-train";
  if (access(train, X_OK) != 0)
    BPFTRAIN_SKIP_OR_FAIL_UNDER_CI(
        "bpftrain-train is not in the guest (configure with the trainer)");
  struct Sample {
    std::map<int, long> all, bound;  // node -> anonymous pages; of those, in mappings bound to rank
    std::string numa_maps;           // the text they came from, shown when a rank falls short
  };
  auto pages = [](const std::map<int, long>& per_node) {
    long sum = 0;
    for (const auto& [node, n] : per_node) sum += n;
    return sum;
  };
  for (const std::string mode : {"numa", "none"}) {
    std::map<int, Sample> seen;  // rank -> its sample with the most bound pages (the last of them)
    char store_dir[] = "/tmp/numalab-store-XXXXXX";  // a fresh rendezvous store per run
    ASSERT_NE(mkdtemp(store_dir), nullptr);
    const std::string store = store_dir;
    std::vector<std::string> args = {
        train,         "--ranks", "2",          "--pin",  mode,
        "--collector", "none",    "--duration", "12",     "--steps",
        "1000000",     "--store", store,        "--data", "/numalab/data/digits.csv.gz"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t launcher = -1;
    ASSERT_EQ(posix_spawn(&launcher, train, nullptr, nullptr, argv.data(), environ), 0);
    // Sample every second while both ranks live; the last sample is the steady state.
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    int status = 0;
    while (waitpid(launcher, &status, WNOHANG) == 0 &&
           std::chrono::steady_clock::now() < deadline) {
      const auto ranks = rankPids(launcher);
      for (const auto& [rank, pid] : ranks) {
        Sample sample{anonPagesPerNode(pid), anonPagesPerNode(pid, rank),
                      readAll("/proc/" + std::to_string(pid) + "/numa_maps")};
        if (sample.all.empty()) continue;  // gone meanwhile
        // A rank frees its buffers before it exits: keep the sample with the most bound pages.
        if (!seen.count(rank) || pages(sample.bound) >= pages(seen[rank].bound))
          seen[rank] = sample;
      }
      std::this_thread::sleep_for(1s);
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      kill(launcher, SIGKILL);
      waitpid(launcher, &status, 0);
      FAIL() << "bpftrain-train --pin " << mode << " did not finish within 120 s";
    }
    std::filesystem::remove_all(store);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "bpftrain-train --pin " << mode << " status " << status;
    ASSERT_EQ(seen.size(), 2u) << "never saw both ranks of --pin " << mode;
    auto at = [](const std::map<int, long>& m, int node) { return m.count(node) ? m.at(node) : 0; };
    for (const auto& [rank, sample] : seen) {
      const long all = pages(sample.all), bound = pages(sample.bound);
      std::printf(
          "--pin %s rank %d: anonymous pages N0=%ld N1=%ld, %.1f%% on node %d; in "
          "mappings bound to node %d: %ld, %ld of them there\n",
          mode.c_str(), rank, at(sample.all, 0), at(sample.all, 1),
          100.0 * double(at(sample.all, rank)) / double(all), rank, rank, bound,
          at(sample.bound, rank));
      if (mode == "numa") {
        EXPECT_GT(bound, 0) << "rank " << rank << ": no mapping bound to node " << rank;
        EXPECT_GE(double(at(sample.bound, rank)), 0.95 * double(bound)) << "rank " << rank;
        // The rest of the rank (heap, dataset, Gloo's buffers, stacks, the libraries' copied
        // data pages) is moved by the anonymous placement (pinner.cc).
        EXPECT_GE(double(at(sample.all, rank)), 0.95 * double(all)) << "rank " << rank;
        if (double(at(sample.all, rank)) < 0.95 * double(all)) {
          // Which mappings hold the pages that are elsewhere: their policy, kind and counts (this
          // is how the libraries' copied pages were found: "file=... anon=N", 245 per rank).
          std::istringstream lines(sample.numa_maps);
          for (std::string line; std::getline(lines, line);)
            if (line.find(" anon=") != std::string::npos &&
                line.find(" N" + std::to_string(1 - rank) + "=") != std::string::npos)
              std::printf("  rank %d remote: %s\n", rank, line.c_str());
        }
      } else {
        EXPECT_EQ(bound, 0) << "--pin none bound memory of rank " << rank;
      }
    }
  }
}

// The controller's pinning decision on two nodes (issue 10): a 2-rank run started `--pin none`
// under a memory policy of node 1 (as `numactl --membind=1` would start it; MPOL_F_NUMA_BALANCING
// so that hinting faults still happen, and no page leaves node 1) has whichever rank runs on node
// 0 fault on remote memory. The collector in the guest (probes, rules policy, --control) moves it
// to `numa` for the cross-node signal, and the remote hinting-fault rate falls once the ranks are
// on their nodes with their pages moved there (pinner.cc: mbind MPOL_MF_MOVE, copied_pages.cc).
TEST_F(NumalabGuestTest, ControllerMovesAMisplacedRunToNumaAndRemoteFaultsFall) {
  const std::string train = "/bin/bpftrain-train", collector = "/bin/bpftrain-collector";
  if (access(train.c_str(), X_OK) != 0 || access(collector.c_str(), X_OK) != 0)
    BPFTRAIN_SKIP_OR_FAIL_UNDER_CI("bpftrain-train or bpftrain-collector is not in the guest");
  char dir_template[] = "/tmp/numalab-ctl-XXXXXX";
  ASSERT_NE(mkdtemp(dir_template), nullptr);
  const std::string dir = dir_template;
  struct Cleanup {
    std::string dir;
    ~Cleanup() { std::filesystem::remove_all(dir); }
  } cleanup{dir};
  const std::string secret = dir + "/secret", decisions = dir + "/decisions.jsonl";
  std::ofstream(secret) << "numalab-controller-test-secret-0123456789";
  chmod(secret.c_str(), 0600);
  // A UDP port for rank 0's control listener: free now (bound to 0, read back, closed).
  int control_port = 0;
  {
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    control_port = ntohs(a.sin_port);
    close(fd);
  }
  const std::string control = "127.0.0.1:" + std::to_string(control_port);
  bpftrain::testing::ChildProcess coll({collector, "--listen", "127.0.0.1:0", "--metrics",
                                        "127.0.0.1:0", "--control", "--policy", "rules", "--secret",
                                        secret, "--trainer", control, "--job", "numa",
                                        "--decisions-log", decisions});
  auto ready = coll.waitLine(std::regex("udp=[0-9.]+:([0-9]+) metrics=[0-9.]+:([0-9]+)"), 60s);
  ASSERT_TRUE(ready) << "collector not ready: " << coll.err;
  const int udp = std::stoi((*ready)[1]), metrics_port = std::stoi((*ready)[2]);

  char store_dir[] = "/tmp/numalab-store-XXXXXX";
  ASSERT_NE(mkdtemp(store_dir), nullptr);
  // The trainer inherits this thread's policy across fork and exec; the test's is restored.
  ASSERT_TRUE(bindMemoryTo(1));
  bpftrain::testing::ChildProcess trainer({train,
                                           "--ranks",
                                           "2",
                                           "--pin",
                                           "none",
                                           "--adaptive",
                                           "--secret",
                                           secret,
                                           "--control",
                                           control,
                                           "--job",
                                           "numa",
                                           "--collector",
                                           "127.0.0.1:" + std::to_string(udp),
                                           "--duration",
                                           "36",
                                           "--steps",
                                           "100000000",
                                           "--eval-every",
                                           "100000000",
                                           "--store",
                                           store_dir,
                                           "--data",
                                           "/numalab/data/digits.csv.gz"});
  ASSERT_TRUE(defaultMemoryPolicy());

  // Remote and local hinting faults of the job, summed over ranks, every 500 ms.
  struct Point {
    int64_t wall_ns;
    double remote, local;
  };
  std::vector<Point> points;
  std::optional<int> status;
  const auto deadline = std::chrono::steady_clock::now() + 150s;
  while (!(status = trainer.wait(500ms)) && std::chrono::steady_clock::now() < deadline) {
    Point p{std::chrono::duration_cast<std::chrono::nanoseconds>(
                std::chrono::system_clock::now().time_since_epoch())
                .count(),
            0, 0};
    for (const auto& [series, value] :
         bpftrain::testing::parseMetrics(bpftrain::testing::httpGet("127.0.0.1", metrics_port))) {
      if (series.rfind("bpftrain_numa_hint_faults_total{", 0) != 0) continue;
      if (series.find("job=\"numa\"") == std::string::npos) continue;
      if (series.find("locality=\"remote\"") != std::string::npos) p.remote += value;
      if (series.find("locality=\"local\"") != std::string::npos) p.local += value;
    }
    points.push_back(p);
    coll.readUntil([] { return false; }, 10ms);  // drain its logs: a full pipe would block it
  }
  std::filesystem::remove_all(store_dir);
  ASSERT_TRUE(status) << "bpftrain-train did not finish within 150 s";
  EXPECT_EQ(*status, 0) << trainer.out << trainer.err;

  // The move to numa and when every rank applied it.
  int64_t decided_ns = 0, applied_ns = 0, undone_ns = 0;
  uint64_t epoch = 0;
  std::string log = readAll(decisions);
  {
    std::istringstream in(log);
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l, nullptr, false);
      if (j.is_discarded()) continue;
      const std::string event = j.value("event", "");
      if (event == "decision" && decided_ns == 0 &&
          j.value("to", "").find("/numa") != std::string::npos) {
        decided_ns = j["wall_ns"].get<int64_t>();
        epoch = j.value("epoch", uint64_t(0));
        EXPECT_EQ(j.value("reason", ""), "cross_node") << l;
      } else if (event == "applied" && decided_ns != 0 && applied_ns == 0 &&
                 j.value("epoch", uint64_t(0)) == epoch) {
        applied_ns = j["wall_ns"].get<int64_t>();
      } else if (event == "decision" && applied_ns != 0 && undone_ns == 0 &&
                 j.value("from", "").find("/numa") != std::string::npos) {
        undone_ns = j["wall_ns"].get<int64_t>();
      }
    }
  }
  ASSERT_GT(decided_ns, 0) << "the controller never moved the run to numa; decisions:\n" << log;
  ASSERT_GT(applied_ns, 0) << "the move to numa was never applied; decisions:\n" << log;
  // Rates from the scrapes: the 8 s before the decision; from 2 s after it applied to the end of
  // the numa period (the trial may undo it on throughput: TCG has no remote-memory cost).
  auto at = [&](int64_t t) {
    Point best = points.front();
    for (const Point& p : points)
      if (p.wall_ns <= t) best = p;
    return best;
  };
  const Point b0 = at(decided_ns - 8'000'000'000), b1 = at(decided_ns);
  const int64_t end_ns = undone_ns != 0 ? undone_ns : points.back().wall_ns;
  const Point a0 = at(applied_ns + 2'000'000'000), a1 = at(end_ns);
  ASSERT_GT(b1.wall_ns, b0.wall_ns);
  ASSERT_GT(a1.wall_ns, a0.wall_ns) << "too short a numa period to measure; decisions:\n" << log;
  const double before = (b1.remote - b0.remote) / (double(b1.wall_ns - b0.wall_ns) * 1e-9);
  const double after = (a1.remote - a0.remote) / (double(a1.wall_ns - a0.wall_ns) * 1e-9);
  const double share_before =
      (b1.remote - b0.remote) / std::max(1.0, b1.remote - b0.remote + b1.local - b0.local);
  const double share_after =
      (a1.remote - a0.remote) / std::max(1.0, a1.remote - a0.remote + a1.local - a0.local);
  std::printf(
      "controller: none -> numa %.1f s into the run, applied %.2f s later%s; remote hinting "
      "faults %.0f/s (share %.2f) before, %.0f/s (share %.2f) under numa over %.1f s\n",
      double(decided_ns - points.front().wall_ns) * 1e-9, double(applied_ns - decided_ns) * 1e-9,
      undone_ns != 0 ? ", undone later" : ", kept", before, share_before, after, share_after,
      double(a1.wall_ns - a0.wall_ns) * 1e-9);
  EXPECT_GT(before, 0) << log;
  EXPECT_LE(after, 0.5 * before) << log;
}

}  // namespace
}  // namespace bpftrain::collector::loader
