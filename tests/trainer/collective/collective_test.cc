// Correctness of every topology: serial sums, bit-identical ranks, switching, node layouts.
#include <gtest/gtest.h>

#include <random>

#include "tests/trainer/collective/collective_test_util.h"

namespace bpftrain::trainer::collective {
namespace {

using namespace std::chrono_literals;
using namespace test_util;

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

}  // namespace
}  // namespace bpftrain::trainer::collective
