// The probes seen the way users see them: bpftrain-collector (port 0) with BPF on, a workload
// with a known answer, and /metrics scraped over HTTP. Root only; label bpf.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "common/wire_format.h"
#include "tests/bpf/workloads.h"
#include "tests/support/collector_process.h"
#include "tests/support/requirements.h"

namespace bpftrain {
namespace {

using namespace std::chrono_literals;
using Metrics = std::map<std::string, double>;
using tests::bpf::Child;

// BPF on, loopback port 0, 60 s window in 200 ms steps; `extra` comes last.
struct Collector : testing::CollectorProcess {
  explicit Collector(std::vector<std::string> extra)
      : CollectorProcess(withDefaults(std::move(extra)), 30s) {}
  static std::vector<std::string> withDefaults(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                                     "--window", "60s",         "--step",    "200ms"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

double sumPrefix(const Metrics& m, const std::string& prefix) {
  double s = 0;
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) s += v;
  return s;
}

double get(const Metrics& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? NAN : it->second;
}

class CollectorProbesTest : public ::testing::Test {
 protected:
  void SetUp() override { BPFTRAIN_REQUIRE_ROOT("CAP_BPF + CAP_PERFMON to load BPF programs"); }
};

TEST_F(CollectorProbesTest, ManualPidMigrationsAndFaultsThroughMetrics) {
  if (sysconf(_SC_NPROCESSORS_ONLN) < 2) GTEST_SKIP() << "needs 2 online CPUs to migrate";
  constexpr int64_t kMoves = 100, kPages = 3000;
  Child target(
      [] { tests::bpf::pinSelf(0); },
      [] { return tests::bpf::migrateSelf(kMoves) + tests::bpf::touchFreshPages(kPages); });
  ASSERT_TRUE(target.ready(5s));
  // Exact run counts: every run of the migration program, not a sampled estimate.
  Collector c({"--pid", std::to_string(target.pid()), "--probe-run-stats", "on"});
  ASSERT_GT(c.metrics_port, 0) << c.proc->err;
  // probe_up appears after the first poll, which is also when the --pid target is installed.
  auto m = c.scrapeUntil(
      [](const Metrics& s) { return get(s, "bpftrain_probe_up{probe=\"migrations\"}") == 1; }, 30s);
  ASSERT_EQ(get(m, "bpftrain_probe_up{probe=\"migrations\"}"), 1) << c.proc->err;
  target.go();
  int64_t done = 0;
  ASSERT_TRUE(target.result(done, 30s));
  ASSERT_EQ(done, kMoves + kPages);
  const std::string who = "{job=\"manual\",rank=\"0\"";
  // The counts and the programs' run statistics are read at different points of a poll: wait for
  // all three rather than take the first scrape that has two.
  m = c.scrapeUntil(
      [&](const Metrics& s) {
        return sumPrefix(s, "bpftrain_migrations_total" + who) >= kMoves &&
               get(s, "bpftrain_page_faults_total" + who + "}") >= kPages &&
               get(s, "bpftrain_probe_runs_total{probe=\"migrations\"}") >= kMoves;
      },
      20s);
  // What the collector said and counted, for a failure's report.
  std::string seen = c.proc->err;
  for (const auto& [k, v] : m)
    if (k.find("migrations") != std::string::npos || k.find("page_faults") != std::string::npos ||
        k.find("probe_up") != std::string::npos)
      seen += k + " " + std::to_string(v) + "\n";
  const double moves = sumPrefix(m, "bpftrain_migrations_total" + who);
  EXPECT_GE(moves, kMoves) << seen;
  EXPECT_LE(moves, kMoves + 2) << seen;  // pinned throughout, at most a move while exiting
  EXPECT_GE(get(m, "bpftrain_page_faults_total" + who + "}"), kPages) << seen;
  // Degraded probes are visible, the rest healthy, and nothing carries a pid label.
  EXPECT_EQ(get(m, "bpftrain_probe_up{probe=\"page_faults\"}"), 1) << seen;
  // The PMU probe follows the host: up with its (eager) series where the event opens, else down
  // and the collector says why.
  const std::string pmu_missing = tests::bpf::dtlbEventUnavailable();
  if (pmu_missing.empty()) {
    EXPECT_EQ(get(m, "bpftrain_probe_up{probe=\"dtlb_misses\"}"), 1) << c.proc->err;
    EXPECT_GE(get(m, "bpftrain_dtlb_misses_total" + who + "}"), 0) << "no dTLB series for the pid";
  } else {
    EXPECT_EQ(get(m, "bpftrain_probe_up{probe=\"dtlb_misses\"}"), 0) << pmu_missing;
    EXPECT_NE(c.proc->err.find("dtlb_misses"), std::string::npos)
        << "the collector should log why the PMU probe is down";
  }
  // bpf_stats reach /metrics: migrations ran a program per move. page_faults of a --pid target
  // are read from /proc/PID/stat and run none
  EXPECT_GE(get(m, "bpftrain_probe_runs_total{probe=\"migrations\"}"), kMoves) << seen;
  // (0, or no series where no run was ever recorded: NaN here)
  EXPECT_FALSE(get(m, "bpftrain_probe_runs_total{probe=\"page_faults\"}") > 0) << seen;
  for (const auto& [k, v] : m) EXPECT_EQ(k.find("pid="), std::string::npos) << k;
}

TEST_F(CollectorProbesTest, RankFromHelloIsTargetedWithJobAndRankLabels) {
  Collector c({});
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  const int port = c.udp_port;
  // The child announces itself as rank 3 of job "probetest" (pid = its own), then keeps faulting
  // fresh pages until killed: it is counted once the collector has targeted it.
  Child rank(
      [port] {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        uint32_t pid = static_cast<uint32_t>(getpid());
        wire::Hello hello{"probetest", "node-a", 3, 4, pid, std::span<const uint32_t>(&pid, 1)};
        uint8_t buf[512];
        const size_t len = wire::encodeHello(std::span<uint8_t>(buf, sizeof(buf)), 77, 0, hello);
        sendto(fd, buf, len, 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
        close(fd);
      },
      [] {
        for (;;) {
          tests::bpf::touchFreshPages(64);
          usleep(5000);
        }
        return int64_t{0};
      });
  ASSERT_TRUE(rank.ready(5s));
  rank.go();
  const std::string key = "bpftrain_page_faults_total{job=\"probetest\",rank=\"3\"}";
  auto m = c.scrapeUntil([&](const Metrics& s) { return get(s, key) >= 64; }, 30s);
  EXPECT_GE(get(m, key), 64) << c.proc->err;
}

// /proc/PID/status (or a task's) field `name`, e.g. "Uid" or "CapEff"; empty when absent.
std::string statusField(const std::string& status_path, const std::string& name) {
  std::ifstream f(status_path);
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(name + ":", 0) == 0) {
      size_t v = line.find_first_not_of(" \t", name.size() + 1);
      return v == std::string::npos ? "" : line.substr(v);
    }
  return {};
}

// Privilege drop (collector/app/privilege.h): after start-up the collector runs as nobody with
// only CAP_BPF, CAP_PERFMON and CAP_SYS_PTRACE on its main thread and none on the others, and
// still targets a rank that said hello after the drop (its page faults reach /metrics).
TEST_F(CollectorProbesTest, DropsToTheUserAndKeepsOnlyWhatTheProbesUseWhileMetricsFlow) {
  Collector c({"--user", "nobody"});
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  ASSERT_TRUE(c.proc->waitFor("capabilities kept:", 5s)) << c.proc->err;
  const std::string status = "/proc/" + std::to_string(c.proc->pid()) + "/status";
  EXPECT_EQ(statusField(status, "Uid"), "65534\t65534\t65534\t65534");
  EXPECT_EQ(statusField(status, "Gid"), "65534\t65534\t65534\t65534");
  // Bits 39 (CAP_BPF), 38 (CAP_PERFMON) and 19 (CAP_SYS_PTRACE).
  const std::string kept = "000000c000080000";
  EXPECT_EQ(statusField(status, "CapEff"), kept);
  EXPECT_EQ(statusField(status, "CapPrm"), kept);
  EXPECT_EQ(statusField(status, "CapBnd"), kept);
  EXPECT_EQ(statusField(status, "CapInh"), "0000000000000000");
  EXPECT_EQ(statusField(status, "CapAmb"), "0000000000000000");
  EXPECT_EQ(statusField(status, "NoNewPrivs"), "1");
  int others = 0;
  for (const auto& t :
       std::filesystem::directory_iterator("/proc/" + std::to_string(c.proc->pid()) + "/task")) {
    if (t.path().filename() == std::to_string(c.proc->pid())) continue;
    ++others;
    EXPECT_EQ(statusField(t.path().string() + "/status", "CapEff"), "0000000000000000")
        << "thread " << t.path().filename();
    EXPECT_EQ(statusField(t.path().string() + "/status", "Uid"), "65534\t65534\t65534\t65534");
  }
  EXPECT_GT(others, 0) << "ingest and /metrics threads";
  EXPECT_NE(c.proc->err.find("user nobody, capabilities kept: cap_bpf,cap_perfmon,cap_sys_ptrace"),
            std::string::npos)
      << c.proc->err;

  const int port = c.udp_port;
  Child rank(
      [port] {
        int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(static_cast<uint16_t>(port));
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        uint32_t pid = static_cast<uint32_t>(getpid());
        wire::Hello hello{"privtest", "node-a", 1, 2, pid, std::span<const uint32_t>(&pid, 1)};
        uint8_t buf[512];
        const size_t len = wire::encodeHello(std::span<uint8_t>(buf, sizeof(buf)), 78, 0, hello);
        sendto(fd, buf, len, 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
        close(fd);
      },
      [] {
        for (;;) {
          tests::bpf::touchFreshPages(64);
          usleep(5000);
        }
        return int64_t{0};
      });
  ASSERT_TRUE(rank.ready(5s));
  rank.go();
  const std::string key = "bpftrain_page_faults_total{job=\"privtest\",rank=\"1\"}";
  // Both in one scrape, with a deadline: the page faults (read from /proc) can show before the
  // probes' up gauges on a loaded host (a CI rehearsal scraped 64 faults and no probe up yet).
  auto m = c.scrapeUntil(
      [&](const Metrics& s) { return get(s, key) >= 64 && sumPrefix(s, "bpftrain_probe_up{") > 0; },
      30s);
  EXPECT_GE(get(m, key), 64) << c.proc->err;
  EXPECT_GT(sumPrefix(m, "bpftrain_probe_up{"), 0) << c.proc->err;

  // Sampled run statistics (the default) still come after the drop: the keeper process switches
  // them as the same user, holding CAP_SYS_ADMIN (bit 21) alone, with no_new_privs and none of
  // the collector's fds.
  m = c.scrapeUntil(
      [](const Metrics& s) { return sumPrefix(s, "bpftrain_probe_run_seconds_total{") > 0; }, 10s);
  EXPECT_GT(sumPrefix(m, "bpftrain_probe_run_seconds_total{"), 0) << c.proc->err;
  EXPECT_NEAR(get(m, "bpftrain_probe_run_stats_measured_ratio"), 1.0 / 30, 1e-9);
  const size_t at = c.proc->err.find("run-statistics keeper pid ");
  ASSERT_NE(at, std::string::npos) << c.proc->err;
  const std::string keeper = std::to_string(std::atoi(c.proc->err.c_str() + at + 26));
  EXPECT_EQ(statusField("/proc/" + keeper + "/status", "Uid"), "65534\t65534\t65534\t65534");
  EXPECT_EQ(statusField("/proc/" + keeper + "/status", "CapEff"), "0000000000200000");
  EXPECT_EQ(statusField("/proc/" + keeper + "/status", "CapPrm"), "0000000000200000");
  EXPECT_EQ(statusField("/proc/" + keeper + "/status", "NoNewPrivs"), "1");
  int fds = 0;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/" + keeper + "/fd")) {
    (void)fd;
    ++fds;
  }
  EXPECT_LE(fds, 5) << "stdout, stderr and its two pipes (and a BPF-stats fd while on)";
}

// Without probes nothing is kept; samples still flow.
TEST_F(CollectorProbesTest, WithoutProbesTheDroppedCollectorKeepsNoCapability) {
  Collector c({"--no-bpf", "--user", "nobody"});
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  ASSERT_TRUE(c.proc->waitFor("capabilities kept: none", 5s)) << c.proc->err;
  const std::string status = "/proc/" + std::to_string(c.proc->pid()) + "/status";
  EXPECT_EQ(statusField(status, "Uid"), "65534\t65534\t65534\t65534");
  EXPECT_EQ(statusField(status, "CapEff"), "0000000000000000");
  EXPECT_EQ(statusField(status, "CapPrm"), "0000000000000000");
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(c.udp_port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const std::string line = "privtest.count:5|c";
  sendto(fd, line.data(), line.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  close(fd);
  auto m = c.scrapeUntil([](const Metrics& s) { return get(s, "privtest_count_total") == 5; }, 10s);
  EXPECT_EQ(get(m, "privtest_count_total"), 5) << c.proc->err;
}

// A --user that does not exist is refused before anything starts.
TEST(CollectorPrivilege, AnUnknownUserExitsTwoNamingTheFix) {
  testing::ChildProcess p({testing::buildPath("collector/app/bpftrain-collector"), "--no-bpf",
                           "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--user",
                           "no-such-user-bpftrain"});
  EXPECT_EQ(p.exitCode(10s), 2);
  EXPECT_NE(p.err.find("--user no-such-user-bpftrain: no such user"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace bpftrain
