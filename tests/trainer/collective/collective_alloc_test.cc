// "No allocation per call once buffers are sized": counts operator new on the threads that call
// allreduce, while they repeat it on the same buffer. (Gloo's transport thread may still allocate
// bookkeeping for messages; the shared-memory node stage sends none.)
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "tests/trainer/collective/collective_test_util.h"

namespace {
std::atomic<long> g_allocations{0};
thread_local bool t_counting = false;
thread_local long t_allocations = 0;  // this thread's, while counting
}  // namespace

void* operator new(std::size_t n) {
  if (t_counting) {
    g_allocations.fetch_add(1, std::memory_order_relaxed);
    ++t_allocations;
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace bpftrain::trainer::collective {
namespace {

using namespace test_util;

// Allocations on the calling threads during 20 calls per rank after the first.
long allocationsPerCall(Topology topology, const std::vector<int>& node_of) {
  g_allocations = 0;
  runRanks(
      int(node_of.size()),
      [&](int, Communicator& comm) {
        std::vector<float> data(200003, 1.0f);
        comm.allreduce(data, topology);  // first call with this buffer builds its caches
        for (int i = 0; i < 20; ++i) {
          std::fill(data.begin(), data.end(), 1.0f);
          t_counting = true;
          comm.allreduce(data, topology);
          t_counting = false;
          ASSERT_EQ(data[12345], float(node_of.size()));
        }
      },
      "", [&](CommOptions& o) { o.node_of = node_of; });
  return g_allocations.load();
}

TEST(CollectiveAlloc, SharedMemoryStageAllocatesNothingPerCall) {
  EXPECT_EQ(allocationsPerCall(Topology::kHierarchical, {0, 0, 0}), 0);
}

TEST(CollectiveAlloc, RingAllocatesOnlyGlooMessageBookkeeping) {
  // Gloo's unbound send/recv queue each operation in maps/deques (measured here: about one
  // allocation per operation); our ring code itself allocates nothing per call. This bounds the
  // total at two per operation:
  // 3 ranks x 20 calls x (8 sends + 8 receives) for 200003 floats.
  const long n = allocationsPerCall(Topology::kRing, {0, 1, 2});
  EXPECT_LE(n, 3 * 20 * 16 * 2) << "allocations in 20 ring calls on 3 ranks";
}

// Communicator::warm sets a topology up for a buffer before training (the trainer does it for
// every topology when it may switch), without moving data: the buffer's contents stay as they
// were. Gloo's halving-doubling and bcube build their buffers per user buffer on its first use
// (bcube two instances, used in turn): on a warmed buffer the first calls allocate nothing, as
// later ones, where the first calls on a buffer not warmed do. (The
// ring and hierarchical set up when connecting; their calls allocate only Gloo's per-message
// bookkeeping, which varies by a few from call to call.)
TEST(CollectiveAlloc, AWarmedBuffersFirstCallsSetNothingUp) {
  const std::vector<int> node_of = {0, 0, 1, 1};
  for (Topology topology : {Topology::kHalvingDoubling, Topology::kBcube}) {
    SCOPED_TRACE(std::string(topologyName(topology)));
    std::atomic<long> cold_first{0}, warmed_first{0}, later{0};
    runRanks(
        int(node_of.size()),
        [&](int, Communicator& comm) {
          std::vector<float> warmed(200003, 3.0f), cold(200003, 0.0f);
          comm.warm(warmed, topology);
          ASSERT_EQ(warmed[12345], 3.0f);  // nothing summed
          auto count = [&](std::vector<float>& data, std::atomic<long>& into) {
            t_allocations = 0;
            for (int i = 0; i < 2; ++i) {  // two: bcube's instances run in turn
              std::fill(data.begin(), data.end(), 1.0f);
              t_counting = true;
              comm.allreduce(data, topology);
              t_counting = false;
              ASSERT_EQ(data[12345], float(node_of.size()));
            }
            into += t_allocations;
          };
          count(warmed, warmed_first);
          count(cold, cold_first);
          count(warmed, later);
        },
        "", [&](CommOptions& o) { o.node_of = node_of; });
    EXPECT_EQ(warmed_first.load(), later.load());
    EXPECT_GT(cold_first.load(), later.load());
  }
}

}  // namespace
}  // namespace bpftrain::trainer::collective
