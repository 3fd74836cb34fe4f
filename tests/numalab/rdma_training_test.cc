// Runs inside tools/numalab --rxe (rdma_guest_fixture.h): bpftrain-train over Gloo's ibverbs
// transport between the two soft-RoCE devices, across live topology switches and with
// hierarchical's leaders on bound buffers, and the ports' counters moving with it.
#include "tests/numalab/rdma_guest_fixture.h"

namespace bpftrain::collector::loader::rdma_guest {
namespace {

// bpftrain-train --transport ibverbs, rank 0 on rxe0 and rank 1 on rxe1 (GID index 1, IPv4),
// with live topology switches ring -> bcube -> ring (seed 27 draws those at steps 100 and 200):
// the ring on bound buffers, then Gloo's bcube, then the ring again. 300 steps at lr 0.1
// (0.9582 on the host with TCP, the same arithmetic: two ranks sum a + b either way): test
// accuracy >= 0.95, the same parameters on both ranks, and the ports' counters move with it.
TEST_F(RdmaGuestTest, TrainsOverIbverbsAcrossTopologySwitches) {
  const char* train = "/bin/bpftrain-train";
  if (access(train, X_OK) != 0)
    BPFTRAIN_SKIP_OR_FAIL_UNDER_CI(
        "bpftrain-train is not in the guest (configure with the trainer)");
  start(ProbeOptions{}, "rdma_port_counters");
  // Without traffic the packet counters stay where they are; every rxe counter has its metric.
  quietSecond();
  poll();
  for (const char* device : {"rxe0", "rxe1"}) {
    EXPECT_EQ(counted("bpftrain_rdma_port_sent_pkts", device), 0) << device;
    EXPECT_EQ(counted("bpftrain_rdma_port_rcvd_pkts", device), 0) << device;
  }
  for (const auto& s : store_->snapshot(monotonicNowNs()))
    EXPECT_NE(s.name, "bpftrain_rdma_port_other") << "an rxe counter without its own metric";

  char store_dir[] = "/tmp/rdma-store-XXXXXX";
  ASSERT_NE(mkdtemp(store_dir), nullptr);
  const std::string log = std::string(store_dir) + ".log";
  std::vector<std::string> args = {train,         "--ranks",       "2",
                                   "--transport", "ibverbs",       "--rdma-device",
                                   "rxe0,rxe1",   "--gid-index",   "1",
                                   "--topology",  "ring",          "--switch-every",
                                   "100",         "--switch-seed", "27",
                                   "--steps",     "300",           "--lr",
                                   "0.1",         "--eval-every",  "200",
                                   "--collector", "none",          "--store",
                                   store_dir,     "--data",        "/numalab/data/digits.csv.gz"};
  const pid_t launcher = spawnLogged(std::move(args), log);
  ASSERT_GT(launcher, 0) << "cannot start " << train;
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
      R"(rank (\d+): final step 300 loss \S+ test_accuracy (\S+) .* params_hash (0x[0-9a-f]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), final_line);
       it != std::sregex_iterator(); ++it) {
    hashes[(*it)[1]] = (*it)[3];
    if ((*it)[1] == "0") accuracy = std::stod((*it)[2]);
  }
  ASSERT_EQ(hashes.size(), 2u) << out;
  EXPECT_EQ(hashes["0"], hashes["1"]) << "parameters differ across ranks:\n" << out;
  EXPECT_GE(accuracy, 0.95) << out;
  for (const char* rank : {"0", "1"}) {
    for (const char* at : {"101: topology bcube", "201: topology ring"})
      EXPECT_NE(out.find(std::string("rank ") + rank + ": applied epoch " +
                         std::to_string(at[0] - '0') + " at step " + at),
                std::string::npos)
          << "rank " << rank << " did not switch at step " << at << ":\n"
          << out;
  }
  // Each step's allreduce is at least one message each way on each device.
  for (const char* device : {"rxe0", "rxe1"}) {
    EXPECT_GE(counted("bpftrain_rdma_port_sent_pkts", device), 300) << device;
    EXPECT_GE(counted("bpftrain_rdma_port_rcvd_pkts", device), 300) << device;
  }
  // ... and stop with it.
  const double sent = counted("bpftrain_rdma_port_sent_pkts", "rxe0");
  quietSecond();
  poll();
  EXPECT_EQ(counted("bpftrain_rdma_port_sent_pkts", "rxe0"), sent);
}

// Hierarchical over ibverbs on two "hosts": 4 ranks, two per rxe device (--node-of 0,0,1,1), so
// the node stage runs inside each pair (TCP on loopback: the guest has no /dev/shm) and the two
// leaders run the ring on bound buffers across the veth; at step 21 a switch to the 4-rank ring
// on bound buffers (seed 2 draws it). One params_hash on all 4 ranks: every sum was formed once.
TEST_F(RdmaGuestTest, HierarchicalLeadersAndTheRingOnBoundBuffersAgreeOnFourRanks) {
  const char* train = "/bin/bpftrain-train";
  if (access(train, X_OK) != 0)
    BPFTRAIN_SKIP_OR_FAIL_UNDER_CI(
        "bpftrain-train is not in the guest (configure with the trainer)");
  char store_dir[] = "/tmp/rdma-hier-XXXXXX";
  ASSERT_NE(mkdtemp(store_dir), nullptr);
  const std::string log = std::string(store_dir) + ".log";
  std::vector<std::string> args = {train,
                                   "--ranks",
                                   "4",
                                   "--transport",
                                   "ibverbs",
                                   "--rdma-device",
                                   "rxe0,rxe0,rxe1,rxe1",
                                   "--node-of",
                                   "0,0,1,1",
                                   "--gid-index",
                                   "1",
                                   "--topology",
                                   "hierarchical",
                                   "--switch-every",
                                   "20",
                                   "--switch-seed",
                                   "2",
                                   "--steps",
                                   "40",
                                   "--eval-every",
                                   "1000",
                                   "--collector",
                                   "none",
                                   "--store",
                                   store_dir,
                                   "--data",
                                   "/numalab/data/digits.csv.gz"};
  const pid_t launcher = spawnLogged(std::move(args), log);
  ASSERT_GT(launcher, 0) << "cannot start " << train;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  int status = 0;
  while (waitpid(launcher, &status, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(200ms);
  const bool finished = std::chrono::steady_clock::now() < deadline;
  if (!finished) {
    kill(launcher, SIGKILL);
    waitpid(launcher, &status, 0);
  }
  const std::string out = readAll(log);
  std::filesystem::remove_all(store_dir);
  std::filesystem::remove(log);
  ASSERT_TRUE(finished) << "4 ranks over ibverbs did not finish within 120 s:\n" << out;
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << out;
  std::map<std::string, std::string> hashes;
  const std::regex final_line(R"(rank (\d+): final step 40 .* params_hash (0x[0-9a-f]+))");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), final_line);
       it != std::sregex_iterator(); ++it)
    hashes[(*it)[1]] = (*it)[2];
  ASSERT_EQ(hashes.size(), 4u) << out;
  for (const char* rank : {"1", "2", "3"})
    EXPECT_EQ(hashes[rank], hashes["0"]) << "rank " << rank << " differs:\n" << out;
  for (const char* rank : {"0", "1", "2", "3"})
    EXPECT_NE(out.find(std::string("rank ") + rank + ": applied epoch 1 at step 21: topology ring"),
              std::string::npos)
        << "rank " << rank << " did not switch to the ring at step 21:\n"
        << out;
}

}  // namespace
}  // namespace bpftrain::collector::loader::rdma_guest
