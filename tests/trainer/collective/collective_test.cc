// Multi-rank tests of the Communicator: one thread per rank in this process (each with its own
// Gloo device and contexts), or one child process per rank where a rank must die.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "trainer/collective/communicator.h"

namespace bpftrain::trainer::collective {
namespace {

using namespace std::chrono_literals;

constexpr Topology kAll[] = {Topology::kRing, Topology::kHalvingDoubling, Topology::kBcube,
                             Topology::kHierarchical};

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/bpftrain-collective-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

CommOptions options(const std::string& store, int rank, int world) {
  CommOptions o;
  o.rank = rank;
  o.world = world;
  o.store = store;
  o.timeout = 20s;
  // Two ranks per "node", so hierarchical exercises both its node and its leader stage.
  for (int r = 0; r < world; ++r) o.node_of.push_back(r / 2);
  return o;
}

// Runs fn(rank, comm) on `world` threads; rethrows the first failure after joining.
void runRanks(int world, const std::function<void(int, Communicator&)>& fn,
              const std::string& store = "",
              const std::function<void(CommOptions&)>& tweak = nullptr) {
  TempDir dir;
  const std::string where = store.empty() ? dir.path() : store;
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto o = options(where, r, world);
        if (tweak) tweak(o);
        auto comm = Communicator::create(o);
        fn(r, *comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

uint64_t hashOf(std::span<const float> v) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes: bit-identical or not
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Small integers: every summation order gives the exact same float, so we can compare to a
// serial sum bit for bit.
float intValue(int rank, size_t i, int salt) {
  return float(int((i * 7 + size_t(rank) * 13 + size_t(salt) * 3) % 64) - 32);
}

TEST(Collective, EveryTopologyEqualsSerialSumOn1To5Ranks) {
  const size_t lengths[] = {1, 2, 7, 1023, 65537, 300007};
  for (int world = 1; world <= 5; ++world) {
    SCOPED_TRACE("world " + std::to_string(world));
    runRanks(world, [&](int rank, Communicator& comm) {
      EXPECT_EQ(comm.rank(), rank);
      EXPECT_EQ(comm.world(), world);
      for (Topology t : kAll) {
        for (size_t len : lengths) {
          std::vector<float> data(len);
          for (size_t i = 0; i < len; ++i) data[i] = intValue(rank, i, int(t));
          comm.allreduce(data, t);
          size_t bad = 0;
          for (size_t i = 0; i < len; ++i) {
            float want = 0;
            for (int r = 0; r < world; ++r) want += intValue(r, i, int(t));
            if (data[i] != want) ++bad;
          }
          EXPECT_EQ(bad, 0u) << topologyName(t) << " len " << len << " rank " << rank;
        }
      }
    });
  }
}

TEST(Collective, ResultsAreBitIdenticalAcrossRanksForRandomFloats) {
  const size_t lengths[] = {1, 7, 1023, 65537, 1000003};
  for (int world : {3, 4, 5}) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::vector<std::vector<uint64_t>> hashes(world);
    std::vector<std::vector<float>> first(world);
    runRanks(world, [&](int rank, Communicator& comm) {
      for (Topology t : kAll) {
        for (size_t len : lengths) {
          std::mt19937 gen(uint32_t(rank * 1000 + len));
          std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
          std::vector<float> data(len);
          for (auto& x : data) x = dist(gen) * (len % 2 ? 1e-3f : 1.0f);
          comm.allreduce(data, t);
          hashes[rank].push_back(hashOf(data));
          if (len == 1023) first[rank].insert(first[rank].end(), data.begin(), data.end());
        }
      }
    });
    for (int r = 1; r < world; ++r) EXPECT_EQ(hashes[r], hashes[0]) << "rank " << r;
    // And they are sums: compare with a double-precision serial sum.
    size_t offset = 0;
    for (Topology t : kAll) {
      for (size_t i = 0; i < 1023; ++i) {
        double want = 0;
        for (int r = 0; r < world; ++r) {
          std::mt19937 gen(uint32_t(r * 1000 + 1023));
          std::uniform_real_distribution<float> dist(-1e3f, 1e3f);
          float x = 0;
          for (size_t j = 0; j <= i; ++j) x = dist(gen) * 1e-3f;
          want += x;
        }
        ASSERT_NEAR(first[0][offset + i], want, 1e-3) << topologyName(t) << " element " << i;
      }
      offset += 1023;
    }
  }
}

TEST(Collective, SwitchingTopologiesInRandomOrderOverOneBuffer) {
  constexpr int kWorld = 4;
  constexpr size_t kLen = 50001;
  constexpr int kSteps = 60;
  std::vector<std::vector<uint64_t>> hashes(kWorld);
  std::vector<Topology> topologies(kSteps);
  runRanks(kWorld, [&](int rank, Communicator& comm) {
    std::mt19937 pick(42);  // same sequence on every rank, as the controller's broadcast gives
    std::vector<float> data(kLen);
    std::mt19937 gen(uint32_t(rank + 1));
    std::uniform_real_distribution<float> dist(-1.f, 1.f);
    for (int step = 0; step < kSteps; ++step) {
      for (auto& x : data) x = dist(gen);
      const Topology t = Topology(pick() % kTopologyCount);
      if (rank == 0) topologies[size_t(step)] = t;
      comm.allreduce(data, t);
      hashes[rank].push_back(hashOf(data));
      // Exact check with integers on the same buffer, so caches keyed by the pointer are reused.
      for (size_t i = 0; i < kLen; ++i) data[i] = intValue(rank, i, step);
      comm.allreduce(data, t);
      size_t bad = 0;
      for (size_t i = 0; i < kLen; ++i) {
        float want = 0;
        for (int r = 0; r < kWorld; ++r) want += intValue(r, i, step);
        bad += data[i] != want;
      }
      ASSERT_EQ(bad, 0u) << "step " << step << " " << topologyName(t);
    }
  });
  for (int r = 1; r < kWorld; ++r)
    for (int step = 0; step < kSteps; ++step)
      EXPECT_EQ(hashes[r][step], hashes[0][step])
          << "rank " << r << " step " << step << " " << topologyName(topologies[step]);
}

// Back to back on one buffer (no other traffic in between) is where a rank can run ahead into a
// peer's receive buffer: every topology, worlds with 1, 2 and 3 bcube/halving-doubling steps.
TEST(Collective, BackToBackCallsStayBitIdentical) {
  constexpr size_t kLen = 20011;
  constexpr int kCalls = 25;
  for (int world : {3, 4, 5, 8}) {
    SCOPED_TRACE("world " + std::to_string(world));
    std::vector<std::vector<uint64_t>> hashes(world);
    runRanks(world, [&](int rank, Communicator& comm) {
      std::mt19937 gen{uint32_t(rank + 7)};
      std::uniform_real_distribution<float> dist(-1.f, 1.f);
      std::vector<float> data(kLen);
      for (Topology t : kAll) {
        for (auto& x : data) x = dist(gen);
        for (int call = 0; call < kCalls; ++call) {
          comm.allreduce(data, t);
          for (auto& x : data) x *= 0.25f;  // keep values finite; still rank-identical
          hashes[rank].push_back(hashOf(data));
        }
      }
    });
    for (int r = 1; r < world; ++r)
      for (size_t i = 0; i < hashes[0].size(); ++i)
        ASSERT_EQ(hashes[r][i], hashes[0][i])
            << "rank " << r << " " << topologyName(kAll[i / kCalls]) << " call " << i % kCalls;
  }
}

// Hierarchical over node layouts (one node, uneven, interleaved, all alone), with the node stage
// through shared memory and through TCP: exact sums and bit-identical results on every rank.
TEST(Collective, HierarchicalNodeLayoutsWithAndWithoutSharedMemory) {
  constexpr int kWorld = 5;
  const std::vector<std::vector<int>> layouts = {
      {0, 0, 0, 0, 0}, {0, 0, 0, 1, 1}, {0, 1, 0, 1, 0}, {3, 1, 4, 1, 5}};
  for (bool shm : {true, false}) {
    for (const auto& layout : layouts) {
      SCOPED_TRACE(std::string(shm ? "shm " : "tcp ") + "layout " + std::to_string(layout[0]) +
                   std::to_string(layout[1]) + std::to_string(layout[2]) +
                   std::to_string(layout[3]) + std::to_string(layout[4]));
      std::vector<uint64_t> hashes(kWorld);
      runRanks(
          kWorld,
          [&](int rank, Communicator& comm) {
            const bool alone = std::count(layout.begin(), layout.end(), layout[rank]) == 1;
            EXPECT_EQ(comm.nodeStage(), alone ? "none" : shm ? "shm" : "tcp");
            for (size_t len : {size_t(1), size_t(1023), size_t(600001)}) {
              std::vector<float> data(len);
              for (size_t i = 0; i < len; ++i) data[i] = intValue(rank, i, 5);
              comm.allreduce(data, Topology::kHierarchical);
              size_t bad = 0;
              for (size_t i = 0; i < len; ++i) {
                float want = 0;
                for (int r = 0; r < kWorld; ++r) want += intValue(r, i, 5);
                bad += data[i] != want;
              }
              ASSERT_EQ(bad, 0u) << "len " << len;
            }
            std::mt19937 gen{uint32_t(rank)};
            std::uniform_real_distribution<float> dist(-1.f, 1.f);
            std::vector<float> data(700001);
            for (auto& x : data) x = dist(gen);
            comm.allreduce(data, Topology::kHierarchical);
            hashes[rank] = hashOf(data);
          },
          "",
          [&](CommOptions& o) {
            o.node_of = layout;
            o.shared_memory = shm;
          });
      for (int r = 1; r < kWorld; ++r) EXPECT_EQ(hashes[r], hashes[0]) << "rank " << r;
    }
  }
}

TEST(Collective, BroadcastAndBarrier) {
  runRanks(3, [&](int rank, Communicator& comm) {
    for (int root = 0; root < 3; ++root) {
      std::vector<uint8_t> word(13, uint8_t(rank == root ? 100 + root : 0));
      comm.broadcast(word, root);
      for (uint8_t b : word) ASSERT_EQ(b, 100 + root);
      comm.barrier();
    }
    std::vector<uint8_t> bad(1);
    EXPECT_THROW(comm.broadcast(bad, 3), std::invalid_argument);
  });
}

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
  try {
    Communicator::create(o);
    ADD_FAILURE() << "empty store accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--store"), std::string::npos);
  }
}

// A free loopback TCP port for a server we start (bound and released: a small race we accept).
int freePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
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
  for (int r = 0; r < kWorld; ++r) {
    if (r == kVictim) continue;
    ASSERT_TRUE(WIFEXITED(status[r])) << "rank " << r;
    EXPECT_EQ(WEXITSTATUS(status[r]), 0) << "rank " << r;
  }
}

TEST(Collective, DeadPeerRaisesWithinTimeout) { deadPeerScenario(/*kill_victim=*/true); }

TEST(Collective, HungPeerRaisesWithinTimeout) { deadPeerScenario(/*kill_victim=*/false); }

}  // namespace
}  // namespace bpftrain::trainer::collective
