// The profiler half: turns NCCL's event callbacks into per-collective completions (algorithm,
// protocol, channels, bytes, time) and per-connection network-step counters (outstanding steps,
// bytes, time per waiting phase). Callbacks run concurrently on user, CUDA-callback and proxy
// threads; they stamp the clock, touch preallocated records and atomics, and push completions
// into a bounded lock-free queue that the agent thread drains: no lock, no allocation, no I/O.
//
// Handles are addresses inside this object's pools, so a NULL, stale or foreign handle is
// recognised by its address and ignored. A ProxyOp whose pid is not ours (PXN: a proxy working
// for another process's rank) carries a parent pointer and context from that other address
// space: neither is dereferenced, and its steps are counted under comm "pxn".
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <cstdint>

#include "plugins/nccl/lockfree.h"
#include "plugins/nccl/nccl_abi.h"

namespace bpftrain::nccl_plugin {

enum class Drop : uint8_t { kPoolFull, kRingFull, kTableFull, kUnknownHandle, kCount };
inline constexpr const char* kDropNames[] = {"pool_full", "ring_full", "table_full",
                                             "unknown_handle"};

// Step waiting phases (bpftrain_nccl_step_wait_seconds{phase}).
enum class Phase : uint8_t { kGpu, kPeer, kNetwork, kFlush, kCount };
inline constexpr const char* kPhaseNames[] = {"gpu", "peer", "network", "flush"};

// Collective, algorithm and protocol as small numbers; names in the label tables below.
inline constexpr const char* kFuncLabels[] = {"broadcast",     "reduce",    "allgather",
                                              "reducescatter", "allreduce", "alltoall",
                                              "gather",        "scatter",   "other"};
inline constexpr uint8_t kFuncAllReduce = 4, kFuncOther = 8;
inline constexpr const char* kAlgoLabels[] = {
    "tree", "ring", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat", "unknown"};
inline constexpr const char* kProtoLabels[] = {"ll", "ll128", "simple", "unknown"};

struct Completion {
  uint32_t comm = 0;  // index into the comm table
  uint8_t func = 0, algo = 0, proto = 0, channels = 0;
  uint64_t bytes = 0;        // nccl-tests size
  uint64_t duration_ns = 0;  // 0: no child event timed it
  bool gpu_timed = false;    // from KernelCh GPU timestamps
};

struct CommInfo {
  uint64_t comm_id = 0;
  int rank = -1, nranks = 0, nnodes = 0;
};

struct LinkCounters {
  uint32_t comm = 0;  // 0: pxn
  uint8_t channel = 0;
  int peer = 0;
  bool send = false;
  uint64_t started = 0, stopped = 0, bytes = 0;
  std::array<uint64_t, size_t(Phase::kCount)> wait_ns{};
};

class ProfilerCore {
 public:
  using Clock = uint64_t (*)();
  static constexpr size_t kMaxComms = 1 << 16;  // communicators over the process's life
  static constexpr size_t kMaxColls = 1024;     // collectives in flight
  static constexpr size_t kMaxOps = 4096;       // proxy operations in flight
  static constexpr size_t kMaxLinks = 4096;     // (comm, channel, peer, direction)
  static constexpr size_t kMaxChannels = 64;    // NCCL's MAXCHANNELS
  static constexpr size_t kSteps = 8;           // NCCL_STEPS
  static constexpr int kDefaultMask = abi::ncclProfileColl | abi::ncclProfileProxyOp |
                                      abi::ncclProfileProxyStep | abi::ncclProfileKernelCh;

  ProfilerCore(Clock clock, pid_t self);

  // init: the context for one communicator (never null: beyond kMaxComms, one that drops).
  void* open(uint64_t comm_id, int nranks, int nnodes, int rank);
  void close(void* ctx);
  void* start(void* ctx, const abi::ncclProfilerEventDescr_v5_t* d);
  void stop(void* handle);
  void record(void* handle, int state, const abi::ncclProfilerEventStateArgs_t* args);

  // ---- the agent thread
  bool popCompletion(Completion& c) { return done_.pop(c); }
  // Completes stopped collectives whose children all stopped at least quiet_ns ago (those that
  // get no KernelCh events). Agent thread only.
  void sweep(uint64_t quiet_ns);
  CommInfo comm(uint32_t index) const;
  template <typename F>
  void forEachLink(F&& f) const {
    for (const Link& l : links_) {
      uint64_t key = l.key.load(std::memory_order_acquire);
      if (key == 0) continue;
      LinkCounters c;
      decodeKey(key, c);
      c.started = l.started.load(std::memory_order_relaxed);
      c.stopped = l.stopped.load(std::memory_order_relaxed);
      c.bytes = l.bytes.load(std::memory_order_relaxed);
      for (size_t i = 0; i < c.wait_ns.size(); ++i)
        c.wait_ns[i] = l.wait_ns[i].load(std::memory_order_relaxed);
      f(c);
    }
  }
  uint64_t dropped(Drop d) const { return drops_[size_t(d)].load(std::memory_order_relaxed); }

 private:
  struct Comm {
    std::atomic<bool> open{false};
    uint64_t comm_id = 0;
    int rank = -1, nranks = 0, nnodes = 0;
  };
  // refs: 1 until the Coll event stops (enqueued) plus one per running child; -1 once completed.
  // A collective completes when refs reaches 0 with every channel's KernelCh stopped, or, without
  // KernelCh events, when sweep() finds it quiet (its ProxyOps may start after the Coll stop).
  struct Coll {
    std::atomic<bool> live{false};
    std::atomic<int32_t> refs{0};
    std::atomic<bool> stopped{false};
    std::atomic<uint32_t> kernels_done{0};
    uint32_t comm = 0;
    uint8_t func = 0, algo = 0, proto = 0, channels = 0;
    uint64_t bytes = 0;
    uint64_t start_ns = 0;
    std::atomic<uint32_t> children{0};
    std::atomic<uint64_t> last_child_ns{0};
    std::atomic<uint64_t> gpu_start{~uint64_t(0)};
    std::atomic<uint64_t> gpu_stop{0};
    std::array<uint64_t, kMaxChannels> kernel{};  // KernelCh handles point here
  };
  struct Step {
    bool active = false;
    bool bytes_counted = false;
    int8_t phase = -1;  // phase of the state it is in; -1 before the first state
    uint64_t mark_ns = 0;
  };
  struct Op {
    uint32_t link = 0;  // index + 1 into links_; 0: not counted (table full)
    int32_t coll = -1;  // parent collective in colls_, -1: none (p2p, pxn)
    bool send = false;
    std::array<Step, kSteps> steps{};
  };
  struct Link {
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> started{0}, stopped{0}, bytes{0};
    std::array<std::atomic<uint64_t>, size_t(Phase::kCount)> wait_ns{};
  };

  static void decodeKey(uint64_t key, LinkCounters& c);
  Comm* commOf(void* ctx);
  uint32_t linkFor(uint32_t comm, uint8_t channel, int peer, bool send);
  bool attach(Coll& c);
  void release(Coll& c, uint64_t now);
  void complete(Coll& c);
  void stopStep(Op& op, Step& s, uint64_t now);
  void drop(Drop d) { drops_[size_t(d)].fetch_add(1, std::memory_order_relaxed); }

  Clock clock_;
  pid_t self_;
  std::array<Comm, kMaxComms> comms_{};
  std::atomic<uint32_t> next_comm_{1};  // 0 is pxn
  RecordPool<Coll, kMaxColls> colls_;
  RecordPool<Op, kMaxOps> ops_;
  std::array<Link, kMaxLinks> links_{};
  BoundedQueue<Completion, 8192> done_;
  std::array<std::atomic<uint64_t>, size_t(Drop::kCount)> drops_{};
};

}  // namespace bpftrain::nccl_plugin
