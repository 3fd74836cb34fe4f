// The fixture of the soft-RoCE guest tests (tools/numalab --rxe: Debian's 6.1 kernel under QEMU,
// soft-RoCE devices rxe0 on v0 and rxe1 on v1 of a veth pair): ProbeService over every probe
// module, the programs the cases start and their clean-up. Shared by rdma_training_test.cc (the
// trainer over Gloo's ibverbs transport) and rdma_probes_test.cc (the RDMA probes' known answers),
// one binary: the ctest `numalab_rdma` boots the guest once and runs it there; elsewhere (no
// rxe0/rxe1) every case skips saying so.
#pragma once

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "bpf/rdma_rxe.h"
#include "collector/ingest/sender_registry.h"
#include "collector/loader/probe_service.h"
#include "collector/window/series_store.h"
#include "common/clock.h"
#include "tests/support/requirements.h"

namespace bpftrain::collector::loader::rdma_guest {

// rdma_rxe samples latency and depth for 1 send WQE in RDMA_RXE_SAMPLE_EVERY of a QP, the first
// included: n WQEs on one QP give this many latency samples, and twice as many depth samples (its
// post and its completion).
constexpr uint64_t rxeSampled(uint64_t n) {
  return (n + RDMA_RXE_SAMPLE_EVERY - 1) / RDMA_RXE_SAMPLE_EVERY;
}

using namespace std::chrono_literals;

inline std::string readAll(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

class RdmaGuestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (access("/sys/class/infiniband/rxe0/ports/1/hw_counters", F_OK) != 0 ||
        access("/sys/class/infiniband/rxe1/ports/1/hw_counters", F_OK) != 0)
      GTEST_SKIP() << "needs the soft-RoCE devices rxe0 and rxe1: run inside tools/numalab --rxe "
                      "(ctest -L numalab does)";
    BPFTRAIN_REQUIRE_ROOT("CAP_BPF + CAP_PERFMON: ProbeService loads every probe module");
    window::WindowConfig config;
    config.window = 600s;  // nothing leaves the window during a test
    config.step = 1s;
    store_ = window::SeriesStore::create(config);
  }

  // A service (probe `probe` up) that has taken its baseline; ~8 s under TCG (every BPF object).
  void start(const ProbeOptions& options, const std::string& probe) {
    std::string error;
    service_ = ProbeService::create(options, *store_, 0, error);
    ASSERT_NE(service_, nullptr) << error;
    bool found = false;
    for (const auto& s : service_->status()) {
      if (s.name != probe) continue;
      found = true;
      ASSERT_TRUE(s.up) << probe << ": " << s.reason;
    }
    ASSERT_TRUE(found) << "no probe " << probe;
    poll();  // the baseline; attaches the targets' uprobes
  }

  // start(), keeping what the modules say on stderr while they load and attach (which form of
  // their programs they run); returns it, and copies it to stderr.
  std::string startLogged(const ProbeOptions& options, const std::string& probe) {
    const std::string log = "/tmp/rdma_guest_probe_start.log";
    std::fflush(stderr);
    const int saved = dup(2);
    const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) {
      close(saved);
      [&] { FAIL() << "cannot write " << log; }();  // fatal: the caller's HasFatalFailure()
      return {};
    }
    dup2(fd, 2);
    close(fd);
    start(options, probe);
    std::fflush(stderr);
    dup2(saved, 2);
    close(saved);
    const std::string said = readAll(log);
    std::fputs(said.c_str(), stderr);
    return said;
  }

  void poll() { service_->poll(registry_, monotonicNowNs()); }

  // The started service has `probe` up as well.
  void requireUp(const std::string& probe) {
    bool up = false;
    std::string reason = "no such probe";
    for (const auto& s : service_->status())
      if (s.name == probe) {
        up = s.up;
        reason = s.reason;
      }
    ASSERT_TRUE(up) << probe << ": " << reason;
  }

  // Starts `args` (argv[0] a path) with stdout and stderr to `log`; -1 when it cannot start.
  static pid_t spawnLogged(std::vector<std::string> args, const std::string& log) {
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    posix_spawn_file_actions_t files;
    posix_spawn_file_actions_init(&files);
    posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&files, 1, 2);
    pid_t pid = -1;
    if (posix_spawn(&pid, argv[0], &files, nullptr, argv.data(), environ) != 0) pid = -1;
    posix_spawn_file_actions_destroy(&files);
    return pid;
  }

  // The series of `metric` with exactly `want` as labels; name empty when there is none.
  window::SeriesSnapshot series(const std::string& metric,
                                const std::map<std::string, std::string>& want) {
    for (auto& s : store_->snapshot(monotonicNowNs())) {
      if (s.name != metric) continue;
      if (std::map<std::string, std::string>(s.labels.begin(), s.labels.end()) == want) return s;
    }
    return {};
  }
  // The total of a work-request series of job "manual": `rank`, `source`, and `op` unless empty;
  // -1 without the series.
  double total(const std::string& metric, const std::string& rank, const std::string& op,
               const std::string& source) {
    std::map<std::string, std::string> want{{"job", "manual"}, {"rank", rank}, {"source", source}};
    if (!op.empty()) want["op"] = op;
    auto s = series(metric, want);
    return s.name.empty() ? -1.0 : s.total;
  }
  // What a counter of rxe DEVICE port 1 counted since the baseline; -1 without the series.
  double counted(const std::string& metric, const std::string& device) {
    auto s = series(metric, {{"device", device}, {"port", "1"}});
    return s.name.empty() ? -1 : s.total;
  }
  // A quiet interval (a measurement, not a wait for a condition).
  static void quietSecond() {
    const auto until = std::chrono::steady_clock::now() + 1s;
    while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(100ms);
  }

  // A bpftrain-rdma-posts pair (rank 0 on rxe0 writes to rank 1 on rxe1).
  static constexpr const char* kPosts = "/bin/bpftrain-rdma-posts";
  struct Posts {
    std::string dir;
    pid_t pids[2] = {-1, -1};
    std::string logs[2];
  };
  // Starts a bpftrain-rdma-posts pair that posts `writes` writes at the go and waits until both
  // have connected; "" when they have, else why not (the pair is cleaned up then).
  std::string startPosts(Posts& run, int writes) {
    return startPair(run, [&](int rank, const std::string& dir) {
      return std::vector<std::string>{kPosts, std::to_string(rank), dir,
                                      "rxe" + std::to_string(rank), std::to_string(writes)};
    });
  }
  // The same for any pair that meets in a directory, prints "ready" and starts at DIR/go
  // (bpftrain-rdma-posts, bpftrain-rdma-flow): `args(rank, dir)` is rank's command line.
  std::string startPair(
      Posts& run, const std::function<std::vector<std::string>(int, const std::string&)>& args) {
    char store_dir[] = "/tmp/rdma-pair-XXXXXX";
    if (!mkdtemp(store_dir)) return "mkdtemp failed";
    run.dir = store_dir;
    for (int rank = 0; rank < 2; ++rank) {
      run.logs[rank] = run.dir + ".rank" + std::to_string(rank);
      std::vector<std::string> argv = args(rank, run.dir);
      run.pids[rank] = spawnLogged(argv, run.logs[rank]);
      if (run.pids[rank] <= 0) {
        cleanPosts(run);
        return "cannot start " + argv[0];
      }
    }
    // Both connected (and waiting for the go) before a probe attaches to them.
    const auto ready_by = std::chrono::steady_clock::now() + 90s;
    auto ready = [&] {
      return readAll(run.logs[0]).find("ready") != std::string::npos &&
             readAll(run.logs[1]).find("ready") != std::string::npos;
    };
    while (!ready() && std::chrono::steady_clock::now() < ready_by)
      std::this_thread::sleep_for(50ms);
    if (ready()) return {};
    const std::string out = readAll(run.logs[0]) + readAll(run.logs[1]);
    cleanPosts(run);
    return "the ranks did not connect within 90 s:\n" + out;
  }
  // Gives the go and waits up to 120 s for both ranks, then polls the service. "ok\n" and their
  // logs when both exited 0, else what went wrong; the pair is cleaned up either way.
  // startPosts() for `writes` writes, and `options` following both ranks (job "manual", ranks 0
  // and 1); skipped (failed under CI) without the workload in the guest.
  void startFollowedPosts(Posts& run, int writes, ProbeOptions& options) {
    if (access(kPosts, X_OK) != 0)
      BPFTRAIN_SKIP_OR_FAIL_UNDER_CI("bpftrain-rdma-posts is not in the guest (tests/numalab)");
    if (std::string error = startPosts(run, writes); !error.empty()) FAIL() << error;
    options.pids = {run.pids[0], run.pids[1]};
  }

  std::string finishPosts(Posts& run) {
    std::ofstream(run.dir + "/go") << "go\n";
    const auto deadline = std::chrono::steady_clock::now() + 120s;
    int status[2] = {0, 0};
    for (int rank = 0; rank < 2; ++rank) {
      while (waitpid(run.pids[rank], &status[rank], WNOHANG) == 0 &&
             std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(50ms);
      if (std::chrono::steady_clock::now() < deadline) run.pids[rank] = -1;
    }
    if (service_) poll();
    const std::string out = readAll(run.logs[0]) + readAll(run.logs[1]);
    const bool exited = run.pids[0] < 0 && run.pids[1] < 0;
    cleanPosts(run);
    if (!exited) return "the pair did not finish within 120 s:\n" + out;
    for (int rank = 0; rank < 2; ++rank)
      if (!WIFEXITED(status[rank]) || WEXITSTATUS(status[rank]) != 0)
        return "rank " + std::to_string(rank) + " status " + std::to_string(status[rank]) + "\n" +
               out;
    return "ok\n" + out;
  }
  static void cleanPosts(Posts& run) {
    for (pid_t& pid : run.pids)
      if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, nullptr, 0);
        pid = -1;
      }
    if (!run.dir.empty()) std::filesystem::remove_all(run.dir);
    for (const auto& log : run.logs)
      if (!log.empty()) std::filesystem::remove(log);
  }

  std::unique_ptr<window::SeriesStore> store_;
  ingest::SenderRegistry registry_;
  std::unique_ptr<ProbeService> service_;
};

}  // namespace bpftrain::collector::loader::rdma_guest
