// NCCL's tuner and profiler plugin ABIs as NCCL 2.28.9 calls them, declared here from the
// layouts in docs/architecture.md's NCCL facts (/work/shared/NCCL-PLUGIN-NOTES.md) and NCCL's
// ext-tuner/ext-profiler headers (tag v2.28.9-1). Only what the plugin reads or exports; no NCCL
// header is included, so the plugin builds without NCCL and never links libnccl.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>

namespace bpftrain::nccl_plugin::abi {

extern "C" {

typedef enum {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
} ncclResult_t;

typedef enum {
  NCCL_LOG_NONE = 0,
  NCCL_LOG_VERSION = 1,
  NCCL_LOG_WARN = 2,
  NCCL_LOG_INFO = 3,
  NCCL_LOG_ABORT = 4,
  NCCL_LOG_TRACE = 5,
} ncclDebugLogLevel;
inline constexpr unsigned long kNcclInit = 1, kNcclTuning = 64;

typedef void (*ncclDebugLogger_t)(ncclDebugLogLevel level, unsigned long flags, const char* file,
                                  int line, const char* fmt, ...);

// ---- tuner
typedef enum {
  ncclFuncBroadcast = 0,
  ncclFuncReduce = 1,
  ncclFuncAllGather = 2,
  ncclFuncReduceScatter = 3,
  ncclFuncAllReduce = 4,
  ncclFuncSendRecv = 5,
  ncclFuncSend = 6,
  ncclFuncRecv = 7,
  ncclNumFuncs = 8,
} ncclFunc_t;

inline constexpr int kNumAlgorithms =
    7;  // TREE RING COLLNET_DIRECT COLLNET_CHAIN NVLS NVLS_TREE PAT
inline constexpr int kNumProtocols = 3;  // LL LL128 SIMPLE
inline constexpr float kAlgoProtoIgnore = -1.0f;

typedef struct {
  int nNvlDomains;
  int minRanksPerNvlDomain;
  int maxRanksPerNvlDomain;
} ncclNvlDomainInfo_v5_t;

// Read by nothing here; the pointer is passed through.
typedef struct {
  double baseLatencies[7][3];
  double hwLatencies[3][7][3];
  double llMaxBws[4][3];
  double perChMaxRingLL128Bws[4][3];
  double perChMaxTreeLL128Bws[4][3];
  double perChMaxTreeBws[4][3];
} ncclTunerConstants_v5_t;

// collCostTable is a contiguous float[7][3] cast to float**: index ((float*)t)[a*numProto + p].
typedef struct {
  const char* name;
  ncclResult_t (*init)(void** ctx, uint64_t commId, size_t nRanks, size_t nNodes,
                       ncclDebugLogger_t logFunction, ncclNvlDomainInfo_v5_t* nvlDomainInfo,
                       ncclTunerConstants_v5_t* constants);
  ncclResult_t (*getCollInfo)(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*finalize)(void* ctx);
} ncclTuner_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** ctx);
  ncclResult_t (*getCollInfo)(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int regBuff,
                              int* nChannels);
  ncclResult_t (*destroy)(void* ctx);
} ncclTuner_v4_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(size_t nRanks, size_t nNodes, ncclDebugLogger_t logFunction, void** ctx);
  ncclResult_t (*getCollInfo)(void* ctx, ncclFunc_t collType, size_t nBytes, int numPipeOps,
                              float** collCostTable, int numAlgo, int numProto, int* nChannels);
  ncclResult_t (*destroy)(void* ctx);
} ncclTuner_v3_t;

// ---- profiler
enum {
  ncclProfileGroup = 1 << 0,
  ncclProfileColl = 1 << 1,
  ncclProfileP2p = 1 << 2,
  ncclProfileProxyOp = 1 << 3,
  ncclProfileProxyStep = 1 << 4,
  ncclProfileProxyCtrl = 1 << 5,
  ncclProfileKernelCh = 1 << 6,
  ncclProfileNetPlugin = 1 << 7,
  ncclProfileGroupApi = 1 << 8,
  ncclProfileCollApi = 1 << 9,
  ncclProfileP2pApi = 1 << 10,
  ncclProfileKernelLaunch = 1 << 11,
};

typedef enum {
  ncclProfilerProxyOpInProgress_v4 = 19,
  ncclProfilerProxyStepSendGPUWait = 8,
  ncclProfilerProxyStepSendPeerWait_v4 = 20,
  ncclProfilerProxyStepSendWait = 9,
  ncclProfilerProxyStepRecvWait = 10,
  ncclProfilerProxyStepRecvFlushWait = 11,
  ncclProfilerProxyStepRecvGPUWait = 12,
  ncclProfilerProxyCtrlIdle = 13,
  ncclProfilerKernelChStop = 22,
} ncclProfilerEventState_t;

typedef struct {
  uint64_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      int graphCaptured;
      int groupDepth;
    } groupApi;
    struct {
      const char* func;
      size_t count;
      const char* datatype;
      int root;
      void* stream;
      bool graphCaptured;
    } collApi;
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
      void* parentGroup;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
      void* parentGroup;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;  // GPU globaltimer, ns
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v5_t;

// v4 (NCCL 2.27): an 8-bit type and no parentGroup; the union's members keep their offsets.
typedef struct {
  uint8_t type;
  void* parentObj;
  int rank;
  union {
    struct {
      uint64_t seqNumber;
      const char* func;
      void const* sendBuff;
      void* recvBuff;
      size_t count;
      int root;
      const char* datatype;
      uint8_t nChannels;
      uint8_t nWarps;
      const char* algo;
      const char* proto;
    } coll;
    struct {
      const char* func;
      void* buff;
      const char* datatype;
      size_t count;
      int peer;
      uint8_t nChannels;
    } p2p;
    struct {
      pid_t pid;
      uint8_t channelId;
      int peer;
      int nSteps;
      int chunkSize;
      int isSend;
    } proxyOp;
    struct {
      int step;
    } proxyStep;
    struct {
      uint8_t channelId;
      uint64_t pTimer;
    } kernelCh;
    struct {
      int64_t id;
      void* data;
    } netPlugin;
  };
} ncclProfilerEventDescr_v4_t;

// Identical in v4 and v5.
typedef union {
  struct {
    size_t transSize;
  } proxyStep;
  struct {
    int appendedProxyOps;
  } proxyCtrl;
  struct {
    void* data;
  } netPlugin;
  struct {
    uint64_t pTimer;
  } kernelCh;
} ncclProfilerEventStateArgs_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, uint64_t commId, int* eActivationMask, const char* commName,
                       int nNodes, int nranks, int rank, ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v5_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v5_t;

typedef struct {
  const char* name;
  ncclResult_t (*init)(void** context, int* eActivationMask, const char* commName,
                       uint64_t commHash, int nNodes, int nranks, int rank,
                       ncclDebugLogger_t logfn);
  ncclResult_t (*startEvent)(void* context, void** eHandle, ncclProfilerEventDescr_v4_t* eDescr);
  ncclResult_t (*stopEvent)(void* eHandle);
  ncclResult_t (*recordEventState)(void* eHandle, ncclProfilerEventState_t eState,
                                   ncclProfilerEventStateArgs_t* eStateArgs);
  ncclResult_t (*finalize)(void* context);
} ncclProfiler_v4_t;

}  // extern "C"

// Layout checks against the upstream headers (x86-64 / aarch64 LP64).
static_assert(sizeof(void*) == 8, "the NCCL plugin ABI here is LP64");
static_assert(offsetof(ncclProfilerEventDescr_v5_t, parentObj) == 8);
static_assert(offsetof(ncclProfilerEventDescr_v5_t, rank) == 16);
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll) == 24);
static_assert(offsetof(ncclProfilerEventDescr_v4_t, coll) == 24);
static_assert(offsetof(ncclProfilerEventDescr_v5_t, coll.algo) ==
              offsetof(ncclProfilerEventDescr_v4_t, coll.algo));
static_assert(offsetof(ncclProfilerEventDescr_v5_t, proxyOp.isSend) ==
              offsetof(ncclProfilerEventDescr_v4_t, proxyOp.isSend));
static_assert(sizeof(ncclTuner_v5_t) == 32 && sizeof(ncclProfiler_v5_t) == 48);

}  // namespace bpftrain::nccl_plugin::abi
