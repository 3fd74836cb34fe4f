// Rendezvous and failure paths: store timeouts, bad options, redis, dead and hung peers.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <thread>

#include "tests/support/loopback.h"
#include "tests/support/requirements.h"
#include "tests/trainer/collective/collective_test_util.h"

namespace bpftrain::trainer::collective {
namespace {

using namespace std::chrono_literals;
using namespace test_util;

TEST(Collective, StoreTimeoutNamesTheMissingRanks) {
  TempDir dir;
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      auto o = options(dir.path(), r, 4);
      o.timeout = 700ms;
      try {
        Communicator::create(o);
      } catch (const std::runtime_error& e) {
        messages[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(messages[r].find("ranks 2,3 of 4 did not join store " + dir.path()),
              std::string::npos)
        << messages[r];
    EXPECT_NE(messages[r].find("within 700ms"), std::string::npos) << messages[r];
  }
}

// Gloo's stores never overwrite a key, so a store directory reused with the same prefix fails;
// the message says so instead of Gloo's "File already exists".
TEST(Collective, ReusedStoreAndPrefixSaySo) {
  TempDir dir;
  runRanks(
      2, [](int, Communicator& comm) { comm.barrier(); }, dir.path());
  std::vector<std::string> messages(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator::create(options(dir.path(), r, 2));
      } catch (const std::runtime_error& e) {
        messages[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& m : messages)
    EXPECT_NE(m.find("already holds keys for prefix bpftrain"), std::string::npos) << m;
  // A different prefix in the same directory is a different job: fine.
  runRanks(
      2, [](int, Communicator& comm) { comm.barrier(); }, dir.path(),
      [](CommOptions& o) { o.prefix = "another-job"; });
}

TEST(Collective, BadOptionsAreRejectedWithTheFix) {
  CommOptions o;
  o.world = 2;
  o.rank = 2;
  o.store = "/tmp";
  EXPECT_THROW(Communicator::create(o), std::invalid_argument);
  o.rank = 0;
  o.node_of = {0};
  EXPECT_THROW(Communicator::create(o), std::invalid_argument);
  o.node_of.clear();
  o.store.clear();
  o.world = 1;  // a single rank needs no store
  EXPECT_EQ(Communicator::create(o)->world(), 1);
  o.world = 2;
  try {
    Communicator::create(o);
    ADD_FAILURE() << "empty store accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--store"), std::string::npos);
  }
}

// The transport binds where it is told (netlab gives each rank a namespace IP; by hostname it
// would resolve to 127.0.0.1): every rank on 127.0.0.2, seen in the kernel's socket table.
TEST(Collective, TransportBindsToTheGivenAddress) {
  std::atomic<int> established{0};
  runRanks(
      3,
      [&](int rank, Communicator& comm) {
        std::vector<float> data(100, 1.0f);
        comm.allreduce(data, Topology::kRing);
        for (float x : data) ASSERT_EQ(x, 3.0f);
        if (rank == 0) {
          std::ifstream tcp("/proc/self/net/tcp");
          std::string line;
          while (std::getline(tcp, line))  // local address 127.0.0.2 is 0200007F, state 01
            if (line.find(" 0200007F:") != std::string::npos &&
                line.find(" 01 ") != std::string::npos)
              ++established;
        }
        comm.barrier();
      },
      "", [](CommOptions& o) { o.bind_address = "127.0.0.2"; });
  EXPECT_GE(established.load(), 2);
}

// Two network namespaces joined by a veth pair, one rank thread in each (setns is per thread):
// the netlab situation. Each rank binds to its namespace's address.
int sh(const std::string& cmd) { return std::system((cmd + " >/dev/null 2>&1").c_str()); }

TEST(Collective, RanksInSeparateNetworkNamespaces) {
  BPFTRAIN_REQUIRE_ROOT("to create network namespaces");
  BPFTRAIN_REQUIRE_TOOL("ip");
  const std::string tag = std::to_string(getpid() % 100000);
  const std::string ns[2] = {"bpftc" + tag + "a", "bpftc" + tag + "b"};
  const std::string addr[2] = {"10.213.0.1", "10.213.0.2"};
  struct Cleanup {
    const std::string* ns;
    ~Cleanup() {
      sh("ip netns del " + ns[0]);
      sh("ip netns del " + ns[1]);
    }
  } cleanup{ns};
  ASSERT_EQ(sh("ip netns add " + ns[0]), 0);
  ASSERT_EQ(sh("ip netns add " + ns[1]), 0);
  ASSERT_EQ(sh("ip link add v" + tag + "a netns " + ns[0] + " type veth peer name v" + tag +
               "b netns " + ns[1]),
            0);
  for (int i = 0; i < 2; ++i) {
    const std::string dev = "v" + tag + (i ? "b" : "a");
    ASSERT_EQ(sh("ip -n " + ns[i] + " addr add " + addr[i] + "/24 dev " + dev), 0);
    ASSERT_EQ(sh("ip -n " + ns[i] + " link set " + dev + " up"), 0);
    ASSERT_EQ(sh("ip -n " + ns[i] + " link set lo up"), 0);
  }
  TempDir dir;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        const int fd = open(("/var/run/netns/" + ns[r]).c_str(), O_RDONLY);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0) throw std::runtime_error("setns failed");
        close(fd);
        auto o = options(dir.path(), r, 2);
        o.bind_address = addr[r];
        o.timeout = 10s;
        auto comm = Communicator::create(o);
        for (Topology t : kAll) {
          std::vector<float> data(70001, float(r + 1));
          comm->allreduce(data, t);
          for (float x : data)
            if (x != 3.0f) throw std::runtime_error("wrong sum");
        }
      } catch (const std::exception& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(errors[0], "");
  EXPECT_EQ(errors[1], "");
}

// NETLAB-NOTES pitfall 1: every pair's send buffer is sized at start-up, whatever runs first. After
// only a barrier (tiny unbound messages), every connection between the ranks already has the same
// locked send buffer, the kernel's cap (2 x net.core.wmem_max, at most 2 x 32 MiB).
TEST(Collective, PairSendBuffersAreSizedAtStartup) {
  BPFTRAIN_REQUIRE_TOOL("ss");
  long wmem_max = 0;
  std::ifstream("/proc/sys/net/core/wmem_max") >> wmem_max;
  const long expected = 2 * std::clamp<long>(wmem_max, 64 << 10, 32 << 20);
  std::vector<long> sizes;
  runRanks(
      3,
      [&](int rank, Communicator& comm) {
        comm.barrier();
        if (rank == 0) {
          // skmem tb<N> is the socket's send buffer; 127.0.0.3 is used by this test only (the
          // accepting ends; Gloo's connecting ends take the kernel's source address).
          FILE* f = popen(
              "ss -tmnH state established '( src 127.0.0.3 or dst 127.0.0.3 )' 2>/dev/null", "r");
          char line[1024];
          while (f && fgets(line, sizeof line, f)) {
            const char* tb = std::strstr(line, ",tb");
            if (tb) sizes.push_back(std::atol(tb + 3));
          }
          if (f) pclose(f);
        }
        comm.barrier();
      },
      "",
      [](CommOptions& o) {
        o.bind_address = "127.0.0.3";
        o.node_of.clear();  // one world context: 3 pairs, both ends in this process
      });
  ASSERT_GE(sizes.size(), 6u) << "expected both ends of 3 connections";
  for (long s : sizes) EXPECT_EQ(s, expected);
}

// Ranks of one "node" that cannot map the same shared memory (here: rank 1 has its own /dev/shm in
// a private mount namespace) fall back to the TCP node stage, say why, and still sum correctly.
TEST(Collective, SharedMemoryUnavailableFallsBackToTcp) {
  BPFTRAIN_REQUIRE_ROOT("to mount a private /dev/shm");
  TempDir dir;
  std::vector<pid_t> pids;
  for (int r = 0; r < 2; ++r) {
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 1;
      try {
        if (r == 1 && (unshare(CLONE_NEWNS) != 0 ||
                       mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
                       mount("tmpfs", "/dev/shm", "tmpfs", 0, nullptr) != 0)) {
          std::fprintf(stderr, "rank 1: private /dev/shm: %s\n", std::strerror(errno));
          _exit(3);
        }
        auto o = options(dir.path(), r, 2);
        o.node_of = {0, 0};
        o.timeout = 10s;
        auto comm = Communicator::create(o);
        const std::string stage = comm->nodeStage();
        std::vector<float> data(300001, float(r + 1));
        comm->allreduce(data, Topology::kHierarchical);
        bool ok = stage.rfind("tcp (shared memory unavailable: ", 0) == 0;
        for (float x : data) ok = ok && x == 3.0f;
        if (!ok) std::fprintf(stderr, "rank %d: stage '%s'\n", r, stage.c_str());
        status = ok ? 0 : 2;
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(status);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  std::vector<int> statuses;
  for (pid_t p : pids) {
    int st = -1;
    while (waitpid(p, &st, WNOHANG) == 0 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(10ms);  // polling child exit against a deadline
    if (st == -1) {
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    statuses.push_back(st);
  }
  for (int st : statuses) EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0) << "status " << st;
}

TEST(Collective, UnusableBindAddressNamesTheFlag) {
  TempDir dir;
  CommOptions o;
  o.world = 1;
  o.store = dir.path();
  o.bind_address = "203.0.113.7";  // TEST-NET-3: not on this host
  try {
    Communicator::create(o);
    ADD_FAILURE() << "bound to an address this host does not have";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("203.0.113.7"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("--bind"), std::string::npos) << e.what();
  }
}

// A free loopback TCP port for a server we start (bound and released: a small race we accept).
int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  uint16_t port = 0;
  bpftrain::testing::bindLoopbackPort0(fd, &port);
  close(fd);
  return port;
}

bool canConnect(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(uint16_t(port));
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(fd);
  return ok;
}

// Cross-host rendezvous goes through Gloo's RedisStore; tools/setup installs redis-server.
TEST(Collective, RedisStoreRendezvous) {
  const int port = freePort();
  const pid_t server = fork();
  ASSERT_GE(server, 0);
  if (server == 0) {
    const std::string p = std::to_string(port);
    execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
           "--appendonly", "no", (char*)nullptr);
    _exit(127);  // not installed: the parent's connect deadline reports it
  }
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!canConnect(port) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(20ms);  // polling the server's port against a deadline
  const bool up = canConnect(port);
  if (up) {
    EXPECT_NO_THROW(runRanks(
        3,
        [](int rank, Communicator& comm) {
          std::vector<float> data(1001, float(rank + 1));
          comm.allreduce(data, Topology::kHierarchical);
          for (float x : data) ASSERT_EQ(x, 6.0f);
        },
        "127.0.0.1:" + std::to_string(port)));
  }
  kill(server, SIGTERM);
  waitpid(server, nullptr, 0);
  ASSERT_TRUE(up) << "redis-server did not start on port " << port
                  << " (is it installed? tools/setup installs it)";
}

TEST(Collective, UnreachableRedisStoreSaysSo) {
  CommOptions o;
  o.world = 2;
  o.store = "127.0.0.1:" + std::to_string(freePort());
  try {
    Communicator::create(o);
    ADD_FAILURE() << "unreachable store accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("cannot reach redis store " + o.store), std::string::npos)
        << e.what();
  }
}

// Child-process ranks: `victim` SIGKILLs itself after the first allreduce (dead) or stops
// participating (hung). Survivors must throw within the timeout; they report through their exit
// status: 0 = threw with rank info in time, 1 = no exception, 2 = too late, 3 = setup failed.
void deadPeerScenario(bool kill_victim) {
  constexpr int kWorld = 4;
  constexpr int kVictim = 2;
  constexpr auto kTimeout = 2s;
  TempDir dir;
  std::vector<pid_t> pids;
  for (int r = 0; r < kWorld; ++r) {
    pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      int status = 3;
      try {
        auto o = options(dir.path(), r, kWorld);
        o.timeout = kTimeout;
        auto comm = Communicator::create(o);
        std::vector<float> data(1 << 20, 1.0f);
        comm->allreduce(data, Topology::kRing);
        if (r == kVictim) {
          if (kill_victim) raise(SIGKILL);
          std::this_thread::sleep_for(kTimeout + 2s);  // alive, silent past the others' timeout
          _exit(0);
        }
        const auto start = std::chrono::steady_clock::now();
        status = 1;
        try {
          for (int i = 0; i < 100; ++i) comm->allreduce(data, Topology(i % kTopologyCount));
        } catch (const std::runtime_error& e) {
          const bool named = std::string(e.what()).find("rank " + std::to_string(r) + " of 4") !=
                             std::string::npos;
          status = std::chrono::steady_clock::now() - start < kTimeout + 1500ms && named ? 0 : 2;
          // +16 when the message also names the victim (the ring neighbours can know it).
          if (status == 0 && std::string(e.what()).find("rank 2]") != std::string::npos)
            status += 16;
          if (!named) fprintf(stderr, "rank %d: message lacks rank: %s\n", r, e.what());
        }
      } catch (const std::exception& e) {
        fprintf(stderr, "rank %d: %s\n", r, e.what());
      }
      _exit(status);
    }
    pids.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  std::vector<int> status(kWorld, -1);
  int left = kWorld;
  while (left > 0 && std::chrono::steady_clock::now() < deadline) {
    int st = 0;
    pid_t p = waitpid(-1, &st, WNOHANG);
    if (p > 0) {
      for (int r = 0; r < kWorld; ++r)
        if (pids[r] == p) status[r] = st;
      --left;
    } else {
      std::this_thread::sleep_for(10ms);  // polling child exit against a deadline
    }
  }
  for (int r = 0; r < kWorld; ++r) {
    if (status[r] == -1) {
      kill(pids[r], SIGKILL);
      waitpid(pids[r], nullptr, 0);
    }
  }
  ASSERT_EQ(left, 0) << "ranks hung past the deadline";
  int victim_named = 0;
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    ASSERT_TRUE(WIFEXITED(status[r])) << "rank " << r;
    EXPECT_EQ(WEXITSTATUS(status[r]) & 15, 0) << "rank " << r;
    if (WEXITSTATUS(status[r]) & 16) ++victim_named;
  }
  EXPECT_GE(victim_named, 1) << "no survivor named the dead/hung rank 2";
}

TEST(Collective, DeadPeerRaisesWithinTimeout) { deadPeerScenario(/*kill_victim=*/true); }

TEST(Collective, HungPeerRaisesWithinTimeout) { deadPeerScenario(/*kill_victim=*/false); }

}  // namespace
}  // namespace bpftrain::trainer::collective
