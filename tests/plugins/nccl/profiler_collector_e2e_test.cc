// The profiler half of libnccl-bpftrain.so end to end: loaded as NCCL loads it, fed a replayed
// NCCL event sequence (collectives with KernelCh timing, proxy ops and network steps), its frames
// reach a real bpftrain-collector (port 0) and show up in /metrics under the job and rank from
// the environment, with exactly the labels the catalogue declares.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "tests/plugins/nccl/plugin_harness.h"
#include "tests/support/catalogue_check.h"
#include "tests/support/collector_process.h"

namespace bpftrain::testing::nccl {
namespace {

using namespace std::chrono_literals;
using Labels = std::vector<std::pair<std::string, std::string>>;

// The value of the series `name` with exactly these labels, in whatever order they are exported.
std::optional<double> find(const CollectorProcess::Metrics& m, const std::string& name,
                           const Labels& labels) {
  for (const auto& [key, value] : m) {
    if (key.rfind(name + "{", 0) != 0) continue;
    if (size_t(std::count(key.begin(), key.end(), '=')) != labels.size()) continue;
    bool all = true;
    for (const auto& [k, v] : labels) all &= key.find(k + "=\"" + v + "\"") != std::string::npos;
    if (all) return value;
  }
  return std::nullopt;
}
double get(const CollectorProcess::Metrics& m, const std::string& name, const Labels& labels) {
  return find(m, name, labels).value_or(-1);
}

TEST(NcclProfilerE2e, CollectivesAndStepsAppearInMetricsWithJobAndRank) {
  CollectorProcess collector({"--no-bpf", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                              "--window", "60s", "--step", "1s"},
                             20s);
  ASSERT_GT(collector.udp_port, 0) << collector.proc->err;
  setenv("BPFTRAIN_COLLECTOR", ("127.0.0.1:" + std::to_string(collector.udp_port)).c_str(), 1);
  setenv("BPFTRAIN_JOB", "ncclprof", 1);
  setenv("RANK", "3", 1);
  setenv("BPFTRAIN_NCCL_FLUSH_MS", "50", 1);

  Plugin plugin(pluginPath("libnccl-profiler-bpftrain.so"));
  ASSERT_NE(plugin.profiler_v5, nullptr) << plugin.error;
  const abi::ncclProfiler_v5_t* p = plugin.profiler_v5;
  int mask = 0;
  void* ctx = nullptr;
  ASSERT_EQ(p->init(&ctx, 0xfeed0001, &mask, "world", 2, 8, 3, &LogCapture::logger),
            abi::ncclSuccess);
  EXPECT_EQ(mask, abi::ncclProfileColl | abi::ncclProfileProxyOp | abi::ncclProfileProxyStep |
                      abi::ncclProfileKernelCh);

  // Ten 1 MiB float AllReduces on 2 channels, RING/SIMPLE, each 1 ms of GPU time, each with one
  // send op of two 64 KiB steps to peer 4 on channel 0.
  constexpr int kColls = 10;
  for (int i = 0; i < kColls; ++i) {
    abi::ncclProfilerEventDescr_v5_t d{};
    d.type = abi::ncclProfileColl;
    d.rank = 3;
    d.coll.func = "AllReduce";
    d.coll.count = 1 << 18;
    d.coll.datatype = "ncclFloat32";
    d.coll.nChannels = 2;
    d.coll.algo = "RING";
    d.coll.proto = "SIMPLE";
    void* coll = nullptr;
    ASSERT_EQ(p->startEvent(ctx, &coll, &d), abi::ncclSuccess);
    ASSERT_NE(coll, nullptr);
    p->stopEvent(coll);
    abi::ncclProfilerEventDescr_v5_t o{};
    o.type = abi::ncclProfileProxyOp;
    o.parentObj = coll;
    o.proxyOp.pid = getpid();
    o.proxyOp.channelId = 0;
    o.proxyOp.peer = 4;
    o.proxyOp.isSend = 1;
    void* op = nullptr;
    p->startEvent(ctx, &op, &o);
    for (int s = 0; s < 2; ++s) {
      abi::ncclProfilerEventDescr_v5_t sd{};
      sd.type = abi::ncclProfileProxyStep;
      sd.parentObj = op;
      sd.proxyStep.step = s;
      void* step = nullptr;
      p->startEvent(ctx, &step, &sd);
      abi::ncclProfilerEventStateArgs_t a{};
      a.proxyStep.transSize = 65536;
      p->recordEventState(step, abi::ncclProfilerProxyStepSendGPUWait, &a);
      p->recordEventState(step, abi::ncclProfilerProxyStepSendWait, &a);
      p->stopEvent(step);
    }
    for (uint8_t ch = 0; ch < 2; ++ch) {
      abi::ncclProfilerEventDescr_v5_t k{};
      k.type = abi::ncclProfileKernelCh;
      k.parentObj = coll;
      k.kernelCh.channelId = ch;
      k.kernelCh.pTimer = 1'000'000'000ull * (i + 1);
      void* kh = nullptr;
      p->startEvent(ctx, &kh, &k);
      abi::ncclProfilerEventStateArgs_t a{};
      a.kernelCh.pTimer = k.kernelCh.pTimer + 1'000'000;
      p->recordEventState(kh, abi::ncclProfilerKernelChStop, &a);
      p->stopEvent(kh);
    }
    p->stopEvent(op);
  }

  const Labels rank = {{"job", "ncclprof"}, {"rank", "3"}};
  Labels coll = rank, link = rank;
  for (auto kv : Labels{{"comm", "00000000feed0001"},
                        {"collective", "allreduce"},
                        {"algorithm", "ring"},
                        {"protocol", "simple"}})
    coll.push_back(kv);
  for (auto kv :
       Labels{{"comm", "00000000feed0001"}, {"channel", "0"}, {"peer", "4"}, {"direction", "send"}})
    link.push_back(kv);
  // Every series asserted below: they travel in separate frames, and one scrape can fall between
  // two (a clean-clone rehearsal read the steps before their bytes).
  auto m = collector.scrapeUntil([&](const CollectorProcess::Metrics& s) {
    return get(s, "bpftrain_nccl_steps_total", link) == 2 * kColls &&
           get(s, "bpftrain_nccl_step_bytes_total", link) == 2 * kColls * 65536 &&
           get(s, "bpftrain_nccl_outstanding_steps", link) == 0 &&
           get(s, "bpftrain_nccl_collective_channels", coll) == 2 &&
           get(s, "bpftrain_nccl_collectives_total", coll) == kColls &&
           get(s, "bpftrain_nccl_collective_bytes_total", coll) == kColls * (1 << 20) &&
           get(s, "bpftrain_allreduce_seconds_count", rank) == kColls &&
           get(s, "bpftrain_allreduce_bytes_total", rank) == kColls * (1 << 20);
  });
  EXPECT_EQ(get(m, "bpftrain_nccl_collectives_total", coll), kColls);
  EXPECT_EQ(get(m, "bpftrain_nccl_collective_bytes_total", coll), kColls * (1 << 20));
  EXPECT_EQ(get(m, "bpftrain_nccl_collective_channels", coll), 2);
  EXPECT_EQ(get(m, "bpftrain_nccl_collective_seconds_count", coll), kColls);
  // 1 MiB in 1 ms over 8 ranks: algbw 2^20/1e-3, busbw x 2*7/8.
  EXPECT_NEAR(get(m, "bpftrain_nccl_busbw_bytes_per_second", coll), (1 << 20) / 1e-3 * 2 * 7 / 8,
              1e3);
  EXPECT_EQ(get(m, "bpftrain_nccl_steps_total", link), 2 * kColls);
  EXPECT_EQ(get(m, "bpftrain_nccl_step_bytes_total", link), 2 * kColls * 65536);
  EXPECT_EQ(get(m, "bpftrain_nccl_outstanding_steps", link), 0);
  // The trainer's names, where the meaning is the same.
  EXPECT_EQ(get(m, "bpftrain_allreduce_seconds_count", rank), kColls);
  EXPECT_EQ(get(m, "bpftrain_allreduce_bytes_total", rank), kColls * (1 << 20));
  EXPECT_NEAR(get(m, "bpftrain_allreduce_busbw_bytes_per_second", rank),
              (1 << 20) / 1e-3 * 2 * 7 / 8, 1e3);
  for (const std::string& problem : catalogueMismatches(m)) ADD_FAILURE() << problem;
  EXPECT_EQ(p->finalize(ctx), abi::ncclSuccess);
}

}  // namespace
}  // namespace bpftrain::testing::nccl
