// One simulated NCCL rank for tuner_plugin_test: loads the plugin as NCCL does, opens one
// communicator (commId 0x5eed, as every rank of it sees) and makes tuner calls, one every SLEEP_MS
// milliseconds, as a training loop's collectives would. Prints the call at which NCCL's choice
// became RING/SIMPLE and whether every call before kept NCCL's own choice and every call after
// kept the decision; exits 100 calls after the switch, or with status 1 after MAX_CALLS.
//   nccl_rank_sim PLUGIN.so MAX_CALLS SLEEP_MS
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tests/plugins/nccl/plugin_harness.h"

using namespace bpftrain::testing::nccl;

int main(int argc, char** argv) {
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
