// Runs inside tools/numalab --rxe (Debian's 6.1 kernel under QEMU, soft-RoCE devices rxe0 on v0 and
// rxe1 on v1 of a veth pair): the trainer over Gloo's ibverbs transport, and the RDMA port counters
// through ProbeService. The ctest `numalab_rdma` boots the guest once and runs this binary there;
// elsewhere (no rxe0/rxe1) every case skips saying so.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "collector/ingest/sender_registry.h"
#include "collector/loader/probe_service.h"
#include "collector/window/series_store.h"
#include "common/clock.h"
#include "tests/support/requirements.h"

namespace bpftrain::collector::loader {
namespace {

using namespace std::chrono_literals;

std::string readAll(const std::string& path) {
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
    std::string error;
    service_ = ProbeService::create(ProbeOptions{}, *store_, 0, error);
    ASSERT_NE(service_, nullptr) << error;
    for (const auto& s : service_->status())
      if (s.name == "rdma_port_counters") {
        ASSERT_TRUE(s.up) << s.reason;
      }
    poll();  // the baseline
  }

  void poll() { service_->poll(registry_, monotonicNowNs()); }

  // What `file` of rxe DEVICE port 1 counted since the baseline.
  double counted(const std::string& metric, const std::string& device) {
    for (const auto& s : store_->snapshot(monotonicNowNs())) {
      if (s.name != metric) continue;
      std::map<std::string, std::string> labels(s.labels.begin(), s.labels.end());
      if (labels == std::map<std::string, std::string>{{"device", device}, {"port", "1"}})
        return s.total;
    }
    return -1;  // no such series
  }

  std::unique_ptr<window::SeriesStore> store_;
  ingest::SenderRegistry registry_;
  std::unique_ptr<ProbeService> service_;
};

// Without traffic the packet counters stay where they are; every rxe counter has its metric.
TEST_F(RdmaGuestTest, CountersStayFlatWithoutTraffic) {
  const auto until = std::chrono::steady_clock::now() + 1s;  // a quiet interval, not a wait
  while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(100ms);
  poll();
  for (const char* device : {"rxe0", "rxe1"}) {
    EXPECT_EQ(counted("bpftrain_rdma_port_sent_pkts", device), 0) << device;
    EXPECT_EQ(counted("bpftrain_rdma_port_rcvd_pkts", device), 0) << device;
  }
  for (const auto& s : store_->snapshot(monotonicNowNs()))
    EXPECT_NE(s.name, "bpftrain_rdma_port_other") << "an rxe counter without its own metric";
}

// bpftrain-train --transport ibverbs, rank 0 on rxe0 and rank 1 on rxe1 (GID index 1, IPv4),
// with live topology switches halving-doubling -> bcube -> halving-doubling -> bcube (seed 27
// draws those at steps 100, 200, 300; ring and hierarchical are never drawn over ibverbs): test
// accuracy >= 0.95, the same parameters on both ranks, and the ports' counters move with it.
TEST_F(RdmaGuestTest, TrainsOverIbverbsAcrossTopologySwitches) {
  const char* train = "/bin/bpftrain-train";
  if (access(train, X_OK) != 0)
    BPFTRAIN_SKIP_OR_FAIL_UNDER_CI(
        "bpftrain-train is not in the guest (configure with the trainer)");
  char store_dir[] = "/tmp/rdma-store-XXXXXX";
  ASSERT_NE(mkdtemp(store_dir), nullptr);
  const std::string log = std::string(store_dir) + ".log";
  std::vector<std::string> args = {train,
                                   "--ranks",
                                   "2",
                                   "--transport",
                                   "ibverbs",
                                   "--rdma-device",
                                   "rxe0,rxe1",
                                   "--gid-index",
                                   "1",
                                   "--topology",
                                   "halving-doubling",
                                   "--switch-every",
                                   "100",
                                   "--switch-seed",
                                   "27",
                                   "--steps",
                                   "400",
                                   "--eval-every",
                                   "200",
                                   "--collector",
                                   "none",
                                   "--store",
                                   store_dir,
                                   "--data",
                                   "/numalab/data/digits.csv.gz"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  pid_t launcher = -1;
  ASSERT_EQ(posix_spawn(&launcher, train, &files, nullptr, argv.data(), environ), 0);
  posix_spawn_file_actions_destroy(&files);
  // Poll once a second while it trains, as the collector does each window step.
  const auto deadline = std::chrono::steady_clock::now() + 240s;
  int status = 0;
  while (waitpid(launcher, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(1s);
    poll();
  }
  const bool finished = std::chrono::steady_clock::now() < deadline;
  if (!finished) {
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
  }
  poll();
  const std::string out = readAll(log);
  std::filesystem::remove_all(store_dir);
  std::filesystem::remove(log);
  ASSERT_TRUE(finished) << "bpftrain-train over ibverbs did not finish within 240 s:\n" << out;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << out;

  std::smatch m;
  std::map<std::string, std::string> hashes;
  double accuracy = -1;
  const std::regex final_line(
      R"(rank (\d+): final step 400 loss \S+ test_accuracy (\S+) .* params_hash (0x[0-9a-f]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), final_line);
       it != std::sregex_iterator(); ++it) {
    hashes[(*it)[1]] = (*it)[3];
    if ((*it)[1] == "0") accuracy = std::stod((*it)[2]);
  }
  ASSERT_EQ(hashes.size(), 2u) << out;
  EXPECT_EQ(hashes["0"], hashes["1"]) << "parameters differ across ranks:\n" << out;
  EXPECT_GE(accuracy, 0.95) << out;
  for (const char* rank : {"0", "1"}) {
    for (const char* at :
         {"101: topology bcube", "201: topology halving-doubling", "301: topology bcube"})
      EXPECT_NE(out.find(std::string("rank ") + rank + ": applied epoch " +
                         std::to_string(at[0] - '0') + " at step " + at),
                std::string::npos)
          << "rank " << rank << " did not switch at step " << at << ":\n"
          << out;
  }
  // Each step's allreduce is at least one message each way on each device.
  for (const char* device : {"rxe0", "rxe1"}) {
    EXPECT_GE(counted("bpftrain_rdma_port_sent_pkts", device), 400) << device;
    EXPECT_GE(counted("bpftrain_rdma_port_rcvd_pkts", device), 400) << device;
  }
  // ... and stop with it.
  const double sent = counted("bpftrain_rdma_port_sent_pkts", "rxe0");
  const auto until = std::chrono::steady_clock::now() + 1s;  // a quiet interval, not a wait
  while (std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(100ms);
  poll();
  EXPECT_EQ(counted("bpftrain_rdma_port_sent_pkts", "rxe0"), sent);
}

}  // namespace
}  // namespace bpftrain::collector::loader
