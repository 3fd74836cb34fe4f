#include "trainer/pinning/pinner.h"

#include <gtest/gtest.h>
#include <numaif.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <set>
#include <thread>

#include "trainer/model/huge_buffer.h"

namespace bpftrain::trainer::pinning {
namespace {

pid_t gettid() { return pid_t(syscall(SYS_gettid)); }

TEST(PinnerPlan, NoneAllowsEveryCpu) {
  Pinner p(0, 1);
  PinPlan plan = p.plan(PinMode::kNone);
  EXPECT_EQ(int(plan.compute_cpus.size()), p.puCount());
  EXPECT_EQ(plan.comm_cpus, plan.compute_cpus);
  EXPECT_EQ(plan.numa_node, -1);
}

TEST(PinnerPlan, CompactGivesEachRankOneContiguousSliceSharedByItsThreads) {
  const int n = Pinner(0, 1).puCount();
  for (int world : {1, 2, 3, 4}) {
    std::multiset<int> used;
    for (int r = 0; r < world; ++r) {
      PinPlan plan = Pinner(r, world).plan(PinMode::kCompact);
      ASSERT_FALSE(plan.compute_cpus.empty());
      EXPECT_EQ(plan.comm_cpus, plan.compute_cpus);
      EXPECT_LE(int(plan.compute_cpus.size()), std::max(1, n / world));
      for (int c : plan.compute_cpus) used.insert(c);
    }
    // With no more ranks than PUs, slices do not overlap.
    if (world <= n) {
      EXPECT_EQ(std::set<int>(used.begin(), used.end()).size(), used.size());
    }
  }
}

TEST(PinnerPlan, SpreadPutsComputeOnOwnPuAndCommElsewhereWhenPossible) {
  const int n = Pinner(0, 1).puCount();
  for (int world : {1, 2, 4}) {
    std::set<int> compute;
    for (int r = 0; r < world; ++r) {
      PinPlan plan = Pinner(r, world).plan(PinMode::kSpread);
      ASSERT_EQ(plan.compute_cpus.size(), 1u);
      compute.insert(plan.compute_cpus[0]);
      if (n / world >= 2) {
        for (int c : plan.comm_cpus) EXPECT_NE(c, plan.compute_cpus[0]);
      }
    }
    EXPECT_EQ(int(compute.size()), std::min(world, n));
  }
}

TEST(PinnerPlan, NumaUsesTheRanksNode) {
  Pinner p(0, 2);
  PinPlan plan = p.plan(PinMode::kNuma);
  EXPECT_GE(plan.numa_node, 0);
  EXPECT_FALSE(plan.compute_cpus.empty());
  EXPECT_EQ(plan.comm_cpus, plan.compute_cpus);
}

// Applies each mode to real threads and reads the masks back from the kernel.
TEST(PinnerApply, MasksReadBackPerThreadAndMemoryBinds) {
  std::atomic<bool> stop{false};
  std::atomic<pid_t> t1{0}, t2{0};
  std::thread a([&] {
    t1 = gettid();
    while (!stop) std::this_thread::yield();
  });
  std::thread b([&] {
    t2 = gettid();
    while (!stop) std::this_thread::yield();
  });
  while (t1 == 0 || t2 == 0) std::this_thread::yield();
  model::HugeBuffer buf(1 << 20, true);
  for (size_t i = 0; i < buf.size(); i += 1024) buf.data()[i] = 1.0f;
  MemoryRegion region{buf.region(), buf.regionBytes()};
  pid_t main_tid = gettid();
  pid_t comm[] = {t1, t2};
  for (int world : {1, 2}) {
    for (int r = 0; r < world; ++r) {
      Pinner p(r, world);
      for (PinMode mode : {PinMode::kCompact, PinMode::kSpread, PinMode::kNuma, PinMode::kNone}) {
        std::string error;
        ASSERT_TRUE(p.apply(mode, std::span(&main_tid, 1), comm, std::span(&region, 1), error))
            << error;
        PinPlan plan = p.plan(mode);
        EXPECT_EQ(affinityOf(main_tid), plan.compute_cpus) << pinModeName(mode);
        EXPECT_EQ(affinityOf(t1), plan.comm_cpus) << pinModeName(mode);
        EXPECT_EQ(affinityOf(t2), plan.comm_cpus) << pinModeName(mode);
        int policy = -1;
        unsigned long mask = 0;
        ASSERT_EQ(get_mempolicy(&policy, &mask, sizeof(mask) * 8, buf.region(), MPOL_F_ADDR), 0);
        if (mode == PinMode::kNuma) {
          EXPECT_EQ(policy, MPOL_BIND);
          EXPECT_EQ(mask, 1ul << plan.numa_node);
        } else {
          EXPECT_EQ(policy, MPOL_DEFAULT) << pinModeName(mode);
        }
      }
    }
  }
  stop = true;
  a.join();
  b.join();
}

TEST(Threads, ListsThisProcessThreads) {
  auto before = listThreads();
  std::atomic<bool> stop{false};
  std::thread t([&] {
    while (!stop) std::this_thread::yield();
  });
  EXPECT_EQ(listThreads().size(), before.size() + 1);
  stop = true;
  t.join();
}

}  // namespace
}  // namespace bpftrain::trainer::pinning
