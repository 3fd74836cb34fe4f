// One simulated NCCL rank for tuner_plugin_test: loads the plugin as NCCL does, opens one
// communicator (commId 0x5eed, as every rank of it sees) and makes tuner calls, one every SLEEP_MS
// milliseconds, as a training loop's collectives would. Prints the call at which NCCL's choice
// became RING/SIMPLE and whether every call before kept NCCL's own choice and every call after
// kept the decision; exits 100 calls after the switch, or with status 1 after MAX_CALLS.
//   nccl_rank_sim PLUGIN.so MAX_CALLS SLEEP_MS
//
// --job mode, for nccl_controller_e2e_test: rank RANK of a 2-rank job whose collective times
// depend on the pair the tuner left NCCL with, so that the collector's NCCL controller has
// something to choose. Tuner and profiler of libnccl-bpftrain.so on one communicator (0x5eed);
// per iteration (1 ms apart) a 64 KiB AllReduce, NCCL's choice TREE/LL, and a 4 MiB one, NCCL's
// choice RING/LL128, each reported to the profiler with the simulated GPU time of the pair in
// force (KernelCh). TREE/LL is fastest at both sizes (mix: 1.1 ms per iteration against NCCL's
// 1.6 ms and RING/LL128's 1.75 ms). Prints "switch call=N to=ALGO/PROTO" whenever the decision in
// force changes (a 0.0 entry in the cost table: the tuner's mark), and at the end
// "done calls=N left_alone=yes|no" (no: a call before the first decision did not keep NCCL's
// own choice). Runs until SIGTERM or SECONDS.
//   nccl_rank_sim --job PLUGIN.so RANK SECONDS
#include <signal.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "tests/plugins/nccl/plugin_harness.h"

using namespace bpftrain::testing::nccl;

namespace {

std::atomic<bool> g_stop{false};
void onTerm(int) { g_stop.store(true); }

constexpr const char* kAlgoNames[] = {
    "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
constexpr const char* kProtoNames[] = {"LL", "LL128", "SIMPLE"};

// Simulated GPU time of one collective, microseconds, by pair and size.
double simulatedUs(std::pair<int, int> arm, bool large) {
  if (arm == std::make_pair(TREE, LL)) return large ? 1000 : 100;
  if (arm == std::make_pair(RING, LL128)) return large ? 1500 : 250;
  return large ? 3000 : 400;
}

// The pair the tuner marked with 0.0 (its decision), or {-1, -1}.
std::pair<int, int> decided(const Table& t) {
  for (int a = 0; a < abi::kNumAlgorithms; ++a)
    for (int p = 0; p < abi::kNumProtocols; ++p)
      if (t[a * abi::kNumProtocols + p] == 0.0f) return {a, p};
  return {-1, -1};
}

int runJob(const std::string& plugin_path, int rank, int seconds) {
  setenv("RANK", std::to_string(rank).c_str(), 1);
  setenv("WORLD_SIZE", "2", 1);
  signal(SIGTERM, onTerm);
  Plugin plugin(plugin_path);
  if (plugin.tuner_v5 == nullptr || plugin.profiler_v5 == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", plugin_path.c_str(), plugin.error.c_str());
    return 2;
  }
  const abi::ncclProfiler_v5_t* prof = plugin.profiler_v5;
  int mask = 0;
  void* pctx = nullptr;
  prof->init(&pctx, 0x5eed, &mask, "world", 1, 2, rank, &LogCapture::logger);
  void* tctx = nullptr;
  plugin.tuner_v5->init(&tctx, 0x5eed, 2, 1, &LogCapture::logger, nullptr, nullptr);

  Table small_table = ncclTable();  // NCCL's choice TREE/LL
  Table large_table = ncclTable();
  large_table[TREE * 3 + LL] = 40.0f;  // NCCL's choice RING/LL128 (11 us)
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  uint64_t gpu_ns = 1'000'000'000;
  long call = 0;
  std::pair<int, int> in_force{-1, -1};
  bool ever_decided = false, left_alone = true;
  while (!g_stop.load() && std::chrono::steady_clock::now() < deadline) {
    for (bool large : {false, true}) {
      Table t = large ? large_table : small_table;
      const std::pair<int, int> own = ncclSelect(t);
      int channels = 0;
      plugin.tuner_v5->getCollInfo(tctx, abi::ncclFuncAllReduce, large ? (4u << 20) : (64u << 10),
                                   1, reinterpret_cast<float**>(t.data()), abi::kNumAlgorithms,
                                   abi::kNumProtocols, 0, &channels);
      const std::pair<int, int> chosen = ncclSelect(t);
      const std::pair<int, int> mark = decided(t);
      if (mark != in_force) {
        in_force = mark;
        ever_decided = ever_decided || mark.first >= 0;
        std::printf(
            "switch call=%ld to=%s\n", call,
            mark.first < 0
                ? "nccl"
                : (std::string(kAlgoNames[mark.first]) + "/" + kProtoNames[mark.second]).c_str());
        std::fflush(stdout);
      }
      if (!ever_decided && chosen != own) left_alone = false;
      ++call;

      abi::ncclProfilerEventDescr_v5_t d{};
      d.type = abi::ncclProfileColl;
      d.rank = rank;
      d.coll.func = "AllReduce";
      d.coll.count = large ? (1u << 20) : (1u << 14);
      d.coll.datatype = "ncclFloat32";
      d.coll.nChannels = 1;
      d.coll.algo = kAlgoNames[chosen.first];
      d.coll.proto = kProtoNames[chosen.second];
      void* coll = nullptr;
      prof->startEvent(pctx, &coll, &d);
      if (coll == nullptr) continue;
      prof->stopEvent(coll);
      abi::ncclProfilerEventDescr_v5_t k{};
      k.type = abi::ncclProfileKernelCh;
      k.parentObj = coll;
      k.kernelCh.channelId = 0;
      k.kernelCh.pTimer = gpu_ns;
      void* kh = nullptr;
      prof->startEvent(pctx, &kh, &k);
      gpu_ns += uint64_t(simulatedUs(chosen, large) * 1000);
      abi::ncclProfilerEventStateArgs_t a{};
      a.kernelCh.pTimer = gpu_ns;
      prof->recordEventState(kh, abi::ncclProfilerKernelChStop, &a);
      prof->stopEvent(kh);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  plugin.tuner_v5->finalize(tctx);
  prof->finalize(pctx);
  std::printf("done calls=%ld left_alone=%s\n", call, left_alone ? "yes" : "no");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 5 && std::string(argv[1]) == "--job")
    return runJob(argv[2], std::atoi(argv[3]), std::atoi(argv[4]));
  if (argc != 4) {
    std::fprintf(stderr, "usage: nccl_rank_sim PLUGIN.so MAX_CALLS SLEEP_MS\n");
    return 2;
  }
  Plugin plugin(argv[1]);
  if (plugin.tuner_v5 == nullptr) {
    std::fprintf(stderr, "cannot load %s: %s\n", argv[1], plugin.error.c_str());
    return 2;
  }
  const long max_calls = std::atol(argv[2]);
  const auto pause = std::chrono::milliseconds(std::atol(argv[3]));
  void* ctx = nullptr;
  plugin.tuner_v5->init(&ctx, 0x5eed, 4, 1, &LogCapture::logger, nullptr, nullptr);
  long switched = -1;
  bool consistent = true;
  for (long call = 0; call < max_calls; ++call) {
    Table t = ncclTable();
    auto chosen = tunerCall(plugin.tuner_v5, ctx, t);
    bool decided = chosen == std::make_pair(RING, SIMPLE);
    if (decided && switched < 0) switched = call;
    if (switched >= 0 && !decided) consistent = false;
    if (switched < 0 && chosen != std::make_pair(TREE, LL)) consistent = false;
    if (switched >= 0 && call >= switched + 100) break;
    std::this_thread::sleep_for(pause);
  }
  plugin.tuner_v5->finalize(ctx);
  if (switched < 0) {
    std::printf("no switch\n");
    return 1;
  }
  std::printf("switched at %ld, %s\n", switched, consistent ? "consistent" : "inconsistent");
  return consistent ? 0 : 1;
}
