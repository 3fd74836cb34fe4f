// Known-answer tests of the profiler's event accounting (plugins/nccl/profiler.h) with a clock
// the test sets: replayed NCCL event sequences give exact collective times (GPU KernelCh time,
// or first start to last proxy stop), exact outstanding-step counts and exact waiting time per
// phase; a foreign-pid ProxyOp, NULL and unknown handles, a mask change in flight and events
// from several threads are accounted exactly and crash nothing.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "plugins/nccl/profiler.h"

namespace bpftrain::nccl_plugin {
namespace {

using abi::ncclProfilerEventDescr_v5_t;
using abi::ncclProfilerEventStateArgs_t;

std::atomic<uint64_t> g_now{0};
uint64_t fakeClock() { return g_now.load(std::memory_order_relaxed); }

class ProfilerCoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_now = 1000;
    ctx_ = core_->open(0xc0ffee, 8, 2, 3);
  }

  void* coll(const char* func = "AllReduce", size_t count = 1 << 20, uint8_t channels = 2,
             const char* algo = "RING", const char* proto = "SIMPLE") {
    ncclProfilerEventDescr_v5_t d{};
    d.type = abi::ncclProfileColl;
    d.rank = 3;
    d.coll.func = func;
    d.coll.count = count;
    d.coll.datatype = "ncclFloat32";
    d.coll.nChannels = channels;
    d.coll.algo = algo;
    d.coll.proto = proto;
    return core_->start(ctx_, &d);
  }
  void* kernel(void* parent, uint8_t channel, uint64_t gpu_start) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = abi::ncclProfileKernelCh;
    d.parentObj = parent;
    d.kernelCh.channelId = channel;
    d.kernelCh.pTimer = gpu_start;
    return core_->start(ctx_, &d);
  }
  void kernelStop(void* h, uint64_t gpu_stop) {
    ncclProfilerEventStateArgs_t a{};
    a.kernelCh.pTimer = gpu_stop;
    core_->record(h, abi::ncclProfilerKernelChStop, &a);
    core_->stop(h);
  }
  void* op(void* parent, uint8_t channel, int peer, bool send, pid_t pid = getpid(),
           void* ctx = nullptr) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = abi::ncclProfileProxyOp;
    d.parentObj = parent;
    d.proxyOp.pid = pid;
    d.proxyOp.channelId = channel;
    d.proxyOp.peer = peer;
    d.proxyOp.nSteps = 4;
    d.proxyOp.isSend = send;
    return core_->start(ctx ? ctx : ctx_, &d);
  }
  void* step(void* parent_op, int step_no) {
    ncclProfilerEventDescr_v5_t d{};
    d.type = abi::ncclProfileProxyStep;
    d.parentObj = parent_op;
    d.proxyStep.step = step_no;
    return core_->start(ctx_, &d);
  }
  void state(void* h, abi::ncclProfilerEventState_t s, size_t bytes = 0) {
    ncclProfilerEventStateArgs_t a{};
    a.proxyStep.transSize = bytes;
    core_->record(h, s, &a);
  }
  std::vector<Completion> completions() {
    std::vector<Completion> out;
    Completion c;
    while (core_->popCompletion(c)) out.push_back(c);
    return out;
  }
  // comm index 1 is this fixture's communicator, 0 is pxn.
  LinkCounters link(uint32_t comm, uint8_t channel, int peer, bool send) {
    LinkCounters found;
    bool any = false;
    core_->forEachLink([&](const LinkCounters& l) {
      if (l.comm == comm && l.channel == channel && l.peer == peer && l.send == send) {
        found = l;
        any = true;
      }
    });
    EXPECT_TRUE(any) << "no link comm " << comm << " ch " << int(channel) << " peer " << peer;
    return found;
  }

  std::unique_ptr<ProfilerCore> core_ = std::make_unique<ProfilerCore>(&fakeClock, getpid());
  void* ctx_ = nullptr;
};

TEST_F(ProfilerCoreTest, ACollectiveIsTimedByItsKernelChannelsOnTheGpuClock) {
  void* c = coll("AllReduce", 1 << 20, 2, "RING", "LL128");
  ASSERT_NE(c, nullptr);
  g_now = 1100;
  core_->stop(c);  // enqueued: not finished
  void* k0 = kernel(c, 0, 50'000);
  void* k1 = kernel(c, 1, 50'400);
  EXPECT_TRUE(completions().empty());
  kernelStop(k0, 80'000);
  EXPECT_TRUE(completions().empty());
  kernelStop(k1, 92'500);
  auto done = completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].comm, 1u);
  EXPECT_EQ(std::string(kFuncLabels[done[0].func]), "allreduce");
  EXPECT_EQ(std::string(kAlgoLabels[done[0].algo]), "ring");
  EXPECT_EQ(std::string(kProtoLabels[done[0].proto]), "ll128");
  EXPECT_EQ(done[0].channels, 2);
  EXPECT_EQ(done[0].bytes, uint64_t(4) << 20);
  EXPECT_TRUE(done[0].gpu_timed);
  EXPECT_EQ(done[0].duration_ns, 92'500u - 50'000u);
  EXPECT_EQ(core_->comm(1).comm_id, 0xc0ffeeu);
  EXPECT_EQ(core_->comm(1).nranks, 8);
}

TEST_F(ProfilerCoreTest, AllGatherBytesAreEveryRanksShare) {
  void* c = coll("AllGather", 1000, 1, "RING", "SIMPLE");
  core_->stop(c);
  void* k = kernel(c, 0, 10);
  kernelStop(k, 20);
  auto done = completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].bytes, 1000u * 4 * 8);  // count x float x 8 ranks (nccl-tests size)
}

// Without KernelCh events the proxy ops time it, and it completes once quiet; ProxyOps may start
// after the Coll event stopped (enqueue comes first).
TEST_F(ProfilerCoreTest, WithoutKernelEventsProxyOpsTimeTheCollective) {
  void* c = coll("AllReduce", 256, 2, "TREE", "LL");
  g_now = 1200;
  core_->stop(c);
  g_now = 1500;
  void* send = op(c, 0, 4, true);
  void* recv = op(c, 1, 2, false);
  g_now = 4000;
  core_->stop(send);
  g_now = 6000;
  core_->stop(recv);
  core_->sweep(1000);
  EXPECT_TRUE(completions().empty());  // quiet for 0 ns < 1000
  g_now = 7000;
  core_->sweep(1000);
  auto done = completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_FALSE(done[0].gpu_timed);
  EXPECT_EQ(done[0].duration_ns, 6000u - 1000u);
}

TEST_F(ProfilerCoreTest, StepsGiveOutstandingCountsBytesAndWaitPerPhase) {
  void* c = coll();
  void* send = op(c, 3, 5, true);
  void* recv = op(c, 3, 7, false);
  // Send: GPU wait 40, peer wait 50, network 250, 4096 bytes.
  g_now = 2000;
  void* s0 = step(send, 0);
  ASSERT_NE(step(send, 1), nullptr);  // a second step, never stopped by NCCL
  state(s0, abi::ncclProfilerProxyStepSendGPUWait);
  g_now = 2040;
  state(s0, abi::ncclProfilerProxyStepSendPeerWait_v4);
  g_now = 2090;
  state(s0, abi::ncclProfilerProxyStepSendWait, 4096);
  state(s0, abi::ncclProfilerProxyStepSendWait, 4096);  // repeated: bytes once per step
  EXPECT_EQ(link(1, 3, 5, true).started - link(1, 3, 5, true).stopped, 2u);
  g_now = 2340;
  core_->stop(s0);
  LinkCounters l = link(1, 3, 5, true);
  EXPECT_EQ(l.started, 2u);
  EXPECT_EQ(l.stopped, 1u);
  EXPECT_EQ(l.bytes, 4096u);
  EXPECT_EQ(l.wait_ns[size_t(Phase::kGpu)], 40u);
  EXPECT_EQ(l.wait_ns[size_t(Phase::kPeer)], 50u);
  EXPECT_EQ(l.wait_ns[size_t(Phase::kNetwork)], 250u);
  // Receive: network 300, flush 20, GPU 80, 8192 bytes.
  g_now = 3000;
  void* r0 = step(recv, 0);
  state(r0, abi::ncclProfilerProxyStepRecvWait);
  g_now = 3300;
  state(r0, abi::ncclProfilerProxyStepRecvFlushWait, 8192);
  g_now = 3320;
  state(r0, abi::ncclProfilerProxyStepRecvGPUWait, 8192);
  g_now = 3400;
  core_->stop(r0);
  LinkCounters r = link(1, 3, 7, false);
  EXPECT_EQ(r.started, 1u);
  EXPECT_EQ(r.stopped, 1u);
  EXPECT_EQ(r.bytes, 8192u);
  EXPECT_EQ(r.wait_ns[size_t(Phase::kNetwork)], 300u);
  EXPECT_EQ(r.wait_ns[size_t(Phase::kFlush)], 20u);
  EXPECT_EQ(r.wait_ns[size_t(Phase::kGpu)], 80u);
  // The op's stop closes a step NCCL never stopped, at that time (no outstanding step leaks).
  g_now = 3500;
  core_->stop(send);
  l = link(1, 3, 5, true);
  EXPECT_EQ(l.stopped, 2u);
  core_->stop(recv);
}

// PXN: the op runs in this process for another process's rank; its parent and context are
// pointers into that other address space and must not be touched (these would fault).
TEST_F(ProfilerCoreTest, AForeignPidProxyOpIsCountedUnderPxnWithoutTouchingItsPointers) {
  void* foreign_parent = reinterpret_cast<void*>(0x10);
  void* foreign_ctx = reinterpret_cast<void*>(0x20);
  void* o = op(foreign_parent, 9, 1, true, getpid() + 1, foreign_ctx);
  ASSERT_NE(o, nullptr);
  g_now = 5000;
  void* s = step(o, 0);
  state(s, abi::ncclProfilerProxyStepSendWait, 512);
  g_now = 5600;
  core_->stop(s);
  core_->stop(o);
  LinkCounters l = link(0, 9, 1, true);
  EXPECT_EQ(l.started, 1u);
  EXPECT_EQ(l.stopped, 1u);
  EXPECT_EQ(l.bytes, 512u);
  EXPECT_EQ(l.wait_ns[size_t(Phase::kNetwork)], 600u);
  EXPECT_TRUE(completions().empty());
}

TEST_F(ProfilerCoreTest, NullAndUnknownHandlesAreIgnoredAndCounted) {
  core_->stop(nullptr);
  core_->record(nullptr, abi::ncclProfilerProxyStepSendWait, nullptr);
  EXPECT_EQ(step(nullptr, 0), nullptr);  // a step whose op got no handle
  EXPECT_EQ(core_->start(ctx_, nullptr), nullptr);
  EXPECT_EQ(core_->start(nullptr, nullptr), nullptr);
  ncclProfilerEventDescr_v5_t d{};
  d.type = abi::ncclProfileColl;
  EXPECT_EQ(core_->start(nullptr, &d), nullptr);  // no context: no collective
  int local = 0;
  EXPECT_EQ(step(&local, 0), nullptr);
  core_->stop(&local);
  core_->record(&local, abi::ncclProfilerProxyStepSendWait, nullptr);
  EXPECT_EQ(core_->dropped(Drop::kUnknownHandle), 2u);  // the unknown step parent and stop
  // Events nobody asked for get no handle.
  for (uint64_t type : {abi::ncclProfileGroup, abi::ncclProfileP2p, abi::ncclProfileGroupApi,
                        abi::ncclProfileCollApi, abi::ncclProfileProxyCtrl}) {
    d.type = type;
    EXPECT_EQ(core_->start(ctx_, &d), nullptr);
  }
  // A stopped collective's handle stopped again: recognised, dropped.
  void* c = coll("AllReduce", 4, 1);
  core_->stop(c);
  void* k = kernel(c, 0, 1);
  kernelStop(k, 2);
  ASSERT_EQ(completions().size(), 1u);
  core_->stop(c);
  EXPECT_EQ(core_->dropped(Drop::kUnknownHandle), 3u);
}

// NCCL reads the activation mask when it creates each task: a change (another communicator's
// init, or the plugin lowering it) leaves events in flight as they were and starts new ones
// without steps. Both kinds are accounted exactly.
TEST_F(ProfilerCoreTest, AMaskChangeInFlightKeepsCountsExact) {
  void* c = coll("AllReduce", 1024, 1);
  void* o1 = op(c, 0, 1, true);
  void* s1 = step(o1, 0);
  void* s2 = step(o1, 1);
  core_->stop(c);
  // ... mask changed: ProxyStep off. The next op comes without steps.
  void* o2 = op(c, 0, 1, true);
  void* k = kernel(c, 0, 100);
  g_now = 2000;
  core_->stop(s1);
  core_->stop(o2);
  kernelStop(k, 900);
  EXPECT_TRUE(completions().empty());  // o1 still running
  g_now = 2500;
  core_->stop(s2);
  core_->stop(o1);
  auto done = completions();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].duration_ns, 800u);
  LinkCounters l = link(1, 0, 1, true);
  EXPECT_EQ(l.started, 2u);
  EXPECT_EQ(l.stopped, 2u);
}

TEST_F(ProfilerCoreTest, SeveralThreadsCountExactly) {
  constexpr int kThreads = 8, kOps = 500, kSteps = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < kOps; ++i) {
        void* c = coll("AllReduce", 64, 1);
        void* o = op(c, uint8_t(t), t + 100, i % 2 == 0);
        for (int s = 0; s < kSteps; ++s) {
          void* h = step(o, s);
          state(h,
                i % 2 == 0 ? abi::ncclProfilerProxyStepSendWait
                           : abi::ncclProfilerProxyStepRecvFlushWait,
                10);
          core_->stop(h);
        }
        core_->stop(c);
        void* k = kernel(c, 0, 1);
        core_->stop(o);
        kernelStop(k, 5);
      }
    });
  size_t completed = 0;
  std::atomic<bool> joined{false};
  std::thread drain([&] {
    Completion c;
    for (;;) {
      if (core_->popCompletion(c)) {
        ++completed;
      } else if (joined.load()) {
        break;
      }
    }
  });
  for (auto& t : threads) t.join();
  joined = true;
  drain.join();
  Completion rest;
  while (core_->popCompletion(rest)) ++completed;
  EXPECT_EQ(completed, size_t(kThreads * kOps));
  for (int t = 0; t < kThreads; ++t)
    for (bool send : {true, false}) {
      LinkCounters l = link(1, uint8_t(t), t + 100, send);
      EXPECT_EQ(l.started, uint64_t(kOps / 2 * kSteps));
      EXPECT_EQ(l.stopped, uint64_t(kOps / 2 * kSteps));
      EXPECT_EQ(l.bytes, uint64_t(kOps / 2 * kSteps * 10));
    }
  EXPECT_EQ(core_->dropped(Drop::kPoolFull), 0u);
  EXPECT_EQ(core_->dropped(Drop::kRingFull), 0u);
}

TEST_F(ProfilerCoreTest, AFullPoolDropsAndCountsInsteadOfBlocking) {
  std::vector<void*> live;
  for (size_t i = 0; i < ProfilerCore::kMaxColls + 5; ++i) live.push_back(coll());
  EXPECT_EQ(live.back(), nullptr);
  EXPECT_EQ(core_->dropped(Drop::kPoolFull), 5u);
  for (void* c : live) core_->stop(c);
  g_now = 1'000'000;
  core_->sweep(0);
  EXPECT_EQ(completions().size(), ProfilerCore::kMaxColls);
  EXPECT_NE(coll(), nullptr);  // freed records are reused
}

}  // namespace
}  // namespace bpftrain::nccl_plugin
