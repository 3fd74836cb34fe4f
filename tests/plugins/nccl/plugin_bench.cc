// tools/bench nccl: the cost of the NCCL plugins' hot paths, through the exported structs of
// libnccl-bpftrain.so loaded as NCCL loads it, with the agent thread running and sending to a
// local UDP socket. Prints ns per tuner getCollInfo call (no decision; a decision in force) and
// ns per profiler callback (each event type's start, state records and stop), on one thread and
// on several threads at once.
//   nccl_plugin_bench PLUGIN.so [--quick]
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "tests/plugins/nccl/plugin_harness.h"

using namespace bpftrain::testing::nccl;
using Clock = std::chrono::steady_clock;

namespace {

double nsPer(Clock::time_point t0, Clock::time_point t1, double n) {
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

// Median of `reps` runs of f(n), in ns per unit.
template <typename F>
double median(int reps, F&& f) {
  std::vector<double> v;
  for (int i = 0; i < reps; ++i) v.push_back(f());
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One collective as NCCL 2.28.9 reports it with the default mask: Coll start/stop, 2 channels of
// KernelCh (start, KernelChStop record, stop), one send ProxyOp with 4 steps (start, 3 state
// records, stop). 1 + 1 + 2*3 + 2 + 4*5 = 30 callbacks.
constexpr int kCallbacksPerCollective = 30;
void oneCollective(const abi::ncclProfiler_v5_t* p, void* ctx, int channel_base) {
  abi::ncclProfilerEventDescr_v5_t d{};
  d.type = abi::ncclProfileColl;
  d.coll.func = "AllReduce";
  d.coll.count = 1 << 18;
  d.coll.datatype = "ncclFloat32";
  d.coll.nChannels = 2;
  d.coll.algo = "RING";
  d.coll.proto = "SIMPLE";
  void* coll = nullptr;
  p->startEvent(ctx, &coll, &d);
  p->stopEvent(coll);
  abi::ncclProfilerEventDescr_v5_t o{};
  o.type = abi::ncclProfileProxyOp;
  o.parentObj = coll;
  o.proxyOp.pid = getpid();
  o.proxyOp.channelId = uint8_t(channel_base);
  o.proxyOp.peer = 1;
  o.proxyOp.isSend = 1;
  void* op = nullptr;
  p->startEvent(ctx, &op, &o);
  abi::ncclProfilerEventStateArgs_t a{};
  a.proxyStep.transSize = 1 << 16;
  for (int s = 0; s < 4; ++s) {
    abi::ncclProfilerEventDescr_v5_t sd{};
    sd.type = abi::ncclProfileProxyStep;
    sd.parentObj = op;
    sd.proxyStep.step = s;
    void* step = nullptr;
    p->startEvent(ctx, &step, &sd);
    p->recordEventState(step, abi::ncclProfilerProxyStepSendGPUWait, &a);
    p->recordEventState(step, abi::ncclProfilerProxyStepSendPeerWait_v4, &a);
    p->recordEventState(step, abi::ncclProfilerProxyStepSendWait, &a);
    p->stopEvent(step);
  }
  for (uint8_t ch = 0; ch < 2; ++ch) {
    abi::ncclProfilerEventDescr_v5_t k{};
    k.type = abi::ncclProfileKernelCh;
    k.parentObj = coll;
    k.kernelCh.channelId = ch;
    k.kernelCh.pTimer = 1000;
    void* kh = nullptr;
    p->startEvent(ctx, &kh, &k);
    abi::ncclProfilerEventStateArgs_t ka{};
    ka.kernelCh.pTimer = 2000;
    p->recordEventState(kh, abi::ncclProfilerKernelChStop, &ka);
    p->stopEvent(kh);
  }
  p->stopEvent(op);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: nccl_plugin_bench PLUGIN.so [--quick]\n");
    return 2;
  }
  const bool quick = argc > 2 && std::strcmp(argv[2], "--quick") == 0;
  const int reps = quick ? 3 : 7;
  const long calls = quick ? 200'000 : 5'000'000;
  const long colls = quick ? 5'000 : 200'000;

  FakeCollector sink;  // the agent's frames go here and are never read
  setenv("BPFTRAIN_COLLECTOR", sink.address().c_str(), 1);
  setenv("BPFTRAIN_JOB", "bench", 1);
  setenv("RANK", "0", 1);
  char secret_path[] = "/tmp/bpftrain-nccl-bench-XXXXXX";  // mkstemp: mode 0600
  int secret_fd = mkstemp(secret_path);
  if (secret_fd < 0 || write(secret_fd, kSecret, sizeof kSecret - 1) < 0) return 1;
  close(secret_fd);
  setenv("BPFTRAIN_SECRET_FILE", secret_path, 1);
  Plugin plugin(argv[1]);
  if (plugin.tuner_v5 == nullptr || plugin.profiler_v5 == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], plugin.error.c_str());
    return 1;
  }
  const abi::ncclTuner_v5_t* t = plugin.tuner_v5;
  const abi::ncclProfiler_v5_t* p = plugin.profiler_v5;
  void* tctx = nullptr;
  t->init(&tctx, 0xbe7c, 8, 1, nullptr, nullptr, nullptr);

  const Table base = ncclTable();
  auto tunerRun = [&] {
    Table table = base;
    int n = 0;
    auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) {
      table = base;  // NCCL builds a fresh table per call too
      t->getCollInfo(tctx, abi::ncclFuncAllReduce, 1 << 20, 1,
                     reinterpret_cast<float**>(table.data()), 7, 3, 0, &n);
    }
    return nsPer(t0, Clock::now(), double(calls));
  };
  auto copyRun = [&] {
    Table table = base;
    auto t0 = Clock::now();
    for (long i = 0; i < calls; ++i) {
      table = base;
      asm volatile("" : : "r"(table.data()) : "memory");
    }
    return nsPer(t0, Clock::now(), double(calls));
  };
  const double copy_ns = median(reps, copyRun);
  const double idle_ns = median(reps, tunerRun) - copy_ns;

  // A decision in force (sent to the address the plugin's hello came from, as the controller
  // does), checked applied before timing: the cost-table edit path.
  double decided_ns = -1;
  if (sink.receiveUntil([&] { return !sink.senders.empty(); }, std::chrono::seconds(10))) {
    bpftrain::wire::NcclControl c{};
    c.job = "bench";
    c.epoch = 1;
    c.start_call = 200;  // a fresh communicator's call 200: well after the decision arrives
    c.algorithm = RING;
    c.protocol = SIMPLE;
    void* old = tctx;  // a fresh communicator; the old one closes after (the agent stays up)
    t->init(&tctx, 0xbe7d, 8, 1, nullptr, nullptr, nullptr);
    t->finalize(old);
    sink.sendDecision(c, sink.senders.begin()->second);
    auto deadline = Clock::now() + std::chrono::seconds(10);
    for (;;) {
      Table probe = base;
      if (tunerCall(t, tctx, probe) == std::make_pair(RING, SIMPLE)) {
        decided_ns = median(reps, tunerRun) - copy_ns;
        break;
      }
      if (Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  int mask = 0;
  void* pctx = nullptr;
  p->init(&pctx, 0xbe7c, &mask, "bench", 1, 8, 0, nullptr);
  auto profRun = [&](int threads) {
    auto t0 = Clock::now();
    std::vector<std::thread> ts;
    for (int th = 0; th < threads; ++th)
      ts.emplace_back([&, th] {
        for (long i = 0; i < colls / threads; ++i) oneCollective(p, pctx, th);
      });
    for (auto& th : ts) th.join();
    return nsPer(t0, Clock::now(), double(colls / threads * threads) * kCallbacksPerCollective);
  };
  const double prof1 = median(reps, [&] { return profRun(1); });
  const unsigned hw = std::max(2u, std::min(8u, std::thread::hardware_concurrency()));
  const double profN = median(reps, [&] { return profRun(int(hw)); });

  std::printf("NCCL plugins, %s (%d reps, median)\n", quick ? "quick" : "full", reps);
  std::printf("  %-52s %8.1f ns\n", "tuner getCollInfo, no decision", idle_ns);
  if (decided_ns >= 0)
    std::printf("  %-52s %8.1f ns\n", "tuner getCollInfo, decision in force (RING/SIMPLE)",
                decided_ns);
  else
    std::printf("  %-52s %8s\n", "tuner getCollInfo, decision in force", "(not applied)");
  std::printf("  %-52s %8.1f ns\n", "profiler callback, 1 thread (30 per collective)", prof1);
  char label[64];
  std::snprintf(label, sizeof label, "profiler callback, %u threads at once", hw);
  std::printf("  %-52s %8.1f ns  (wall time / all threads' callbacks)\n", label, profN);
  std::printf("  %-52s %8.1f ns\n", "(a 21-float table copy, subtracted above)", copy_ns);
  p->finalize(pctx);
  t->finalize(tctx);
  unlink(secret_path);
  return decided_ns >= 0 ? 0 : 1;
}
