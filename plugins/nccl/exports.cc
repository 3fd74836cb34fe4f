// The only symbols libnccl-bpftrain.so exports (exports.map): the tuner structs v5, v4, v3 and
// the profiler structs v5, v4, each `extern "C" const` at namespace scope with default
// visibility (a braced extern "C" block or a plain namespace-scope const would not be exported).
// Every entry point is noexcept and returns ncclSuccess: a tuner error would fail communicator
// creation or the collective, so failures are counted and logged instead.
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <new>
#include <utility>

#include "plugins/nccl/agent.h"
#include "plugins/nccl/decision_board.h"
#include "plugins/nccl/nccl_abi.h"
#include "plugins/nccl/profiler.h"
#include "plugins/nccl/tuner.h"

namespace bpftrain::nccl_plugin {
namespace {

using namespace abi;

uint64_t monotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // vDSO: no system call
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// Constructed at load, never destroyed: a PyTorch job often exits without finalizing its
// communicators, and the agent thread must not meet destroyed objects during exit.
template <typename T>
class Immortal {
 public:
  template <typename... A>
  explicit Immortal(A&&... args) {
    new (storage_) T(std::forward<A>(args)...);
  }
  T& operator*() { return *std::launder(reinterpret_cast<T*>(storage_)); }
  T* operator->() { return &**this; }

 private:
  alignas(T) unsigned char storage_[sizeof(T)];
};

// One instance per process, shared by both plugins (two symlinks, one dlopen'ed library).
Immortal<DecisionBoard> g_board;
Immortal<Tuner> g_tuner(*g_board);
Immortal<ProfilerCore> g_profiler(&monotonicNs, getpid());
Immortal<Agent> g_agent(*g_profiler, *g_tuner, *g_board);
std::atomic<int> g_event_mask{-1};  // from the environment, at the first profiler init

// ---- tuner
ncclResult_t tunerInit(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                       ncclDebugLogger_t logger) noexcept {
  try {
    *ctx = g_tuner->open(comm_id, nranks, nnodes);
    g_agent->acquire(logger, -1, int(nranks));
  } catch (...) {
    // No thread (std::system_error) or no memory: the tuner still answers, without decisions.
  }
  return ncclSuccess;
}

ncclResult_t tunerInitV5(void** ctx, uint64_t comm_id, size_t nranks, size_t nnodes,
                         ncclDebugLogger_t logger, ncclNvlDomainInfo_v5_t*,
                         ncclTunerConstants_v5_t*) noexcept {
  return tunerInit(ctx, comm_id, nranks, nnodes, logger);
}

ncclResult_t tunerInitV3V4(size_t nranks, size_t nnodes, ncclDebugLogger_t logger,
                           void** ctx) noexcept {
  return tunerInit(ctx, 0, nranks, nnodes, logger);  // no commId before v5
}

ncclResult_t tunerGetCollInfo(void* ctx, ncclFunc_t coll, size_t, int, float** table, int algos,
                              int protos, int, int* channels) noexcept {
  g_tuner->getCollInfo(static_cast<TunerContext*>(ctx), coll, reinterpret_cast<float*>(table),
                       algos, protos, channels);
  return ncclSuccess;
}

ncclResult_t tunerGetCollInfoV3(void* ctx, ncclFunc_t coll, size_t bytes, int pipe, float** table,
                                int algos, int protos, int* channels) noexcept {
  return tunerGetCollInfo(ctx, coll, bytes, pipe, table, algos, protos, 0, channels);
}

ncclResult_t tunerFinalize(void* ctx) noexcept {
  g_tuner->close(static_cast<TunerContext*>(ctx));
  try {
    g_agent->release();
  } catch (...) {
  }
  return ncclSuccess;
}

// ---- profiler
ncclResult_t profilerInitV5(void** ctx, uint64_t comm_id, int* mask, const char*, int nnodes,
                            int nranks, int rank, ncclDebugLogger_t logger) noexcept {
  int events = g_event_mask.load();
  try {
    g_agent->acquire(logger, rank, nranks);
    if (events < 0) g_event_mask.store(events = AgentConfig::fromEnvironment().event_mask);
  } catch (...) {
    events = ProfilerCore::kDefaultMask;
  }
  // One process-wide int, last writer wins: every init writes the same value.
  if (mask != nullptr) __atomic_store_n(mask, events, __ATOMIC_RELAXED);
  *ctx = g_profiler->open(comm_id, nranks, nnodes, rank);
  return ncclSuccess;
}

ncclResult_t profilerInitV4(void** ctx, int* mask, const char* name, uint64_t comm_hash, int nnodes,
                            int nranks, int rank, ncclDebugLogger_t logger) noexcept {
  return profilerInitV5(ctx, comm_hash, mask, name, nnodes, nranks, rank, logger);
}

ncclResult_t profilerStartV5(void* ctx, void** handle, ncclProfilerEventDescr_v5_t* d) noexcept {
  void* h = g_profiler->start(ctx, d);
  if (handle != nullptr) *handle = h;
  return ncclSuccess;
}

ncclResult_t profilerStartV4(void* ctx, void** handle, ncclProfilerEventDescr_v4_t* d4) noexcept {
  if (d4 == nullptr) {
    if (handle != nullptr) *handle = nullptr;
    return ncclSuccess;
  }
  // The union members keep their offsets (static_asserts in nccl_abi.h); copy the parts read.
  ncclProfilerEventDescr_v5_t d{};
  d.type = d4->type;
  d.parentObj = d4->parentObj;
  d.rank = d4->rank;
  switch (d4->type) {
    case ncclProfileColl:
      d.coll.seqNumber = d4->coll.seqNumber;
      d.coll.func = d4->coll.func;
      d.coll.count = d4->coll.count;
      d.coll.datatype = d4->coll.datatype;
      d.coll.nChannels = d4->coll.nChannels;
      d.coll.nWarps = d4->coll.nWarps;
      d.coll.algo = d4->coll.algo;
      d.coll.proto = d4->coll.proto;
      break;
    case ncclProfileProxyOp:
      d.proxyOp.pid = d4->proxyOp.pid;
      d.proxyOp.channelId = d4->proxyOp.channelId;
      d.proxyOp.peer = d4->proxyOp.peer;
      d.proxyOp.nSteps = d4->proxyOp.nSteps;
      d.proxyOp.chunkSize = d4->proxyOp.chunkSize;
      d.proxyOp.isSend = d4->proxyOp.isSend;
      break;
    case ncclProfileProxyStep:
      d.proxyStep.step = d4->proxyStep.step;
      break;
    case ncclProfileKernelCh:
      d.kernelCh.channelId = d4->kernelCh.channelId;
      d.kernelCh.pTimer = d4->kernelCh.pTimer;
      break;
    default:
      break;
  }
  return profilerStartV5(ctx, handle, &d);
}

ncclResult_t profilerStop(void* handle) noexcept {
  g_profiler->stop(handle);
  return ncclSuccess;
}

ncclResult_t profilerRecord(void* handle, ncclProfilerEventState_t state,
                            ncclProfilerEventStateArgs_t* args) noexcept {
  g_profiler->record(handle, state, args);
  return ncclSuccess;
}

ncclResult_t profilerFinalize(void* ctx) noexcept {
  g_profiler->close(ctx);
  try {
    g_agent->release();
  } catch (...) {
  }
  return ncclSuccess;
}

}  // namespace
}  // namespace bpftrain::nccl_plugin

namespace np = bpftrain::nccl_plugin;

#define BPFTRAIN_EXPORT __attribute__((visibility("default")))

extern "C" BPFTRAIN_EXPORT const np::abi::ncclTuner_v5_t ncclTunerPlugin_v5 = {
    "bpftrain", np::tunerInitV5, np::tunerGetCollInfo, np::tunerFinalize};
extern "C" BPFTRAIN_EXPORT const np::abi::ncclTuner_v4_t ncclTunerPlugin_v4 = {
    "bpftrain", np::tunerInitV3V4, np::tunerGetCollInfo, np::tunerFinalize};
extern "C" BPFTRAIN_EXPORT const np::abi::ncclTuner_v3_t ncclTunerPlugin_v3 = {
    "bpftrain", np::tunerInitV3V4, np::tunerGetCollInfoV3, np::tunerFinalize};
extern "C" BPFTRAIN_EXPORT const np::abi::ncclProfiler_v5_t ncclProfiler_v5 = {
    "bpftrain",       np::profilerInitV5, np::profilerStartV5,
    np::profilerStop, np::profilerRecord, np::profilerFinalize};
extern "C" BPFTRAIN_EXPORT const np::abi::ncclProfiler_v4_t ncclProfiler_v4 = {
    "bpftrain",       np::profilerInitV4, np::profilerStartV4,
    np::profilerStop, np::profilerRecord, np::profilerFinalize};
