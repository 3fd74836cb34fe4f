#include "plugins/nccl/profiler.h"

#include <cstring>

namespace bpftrain::nccl_plugin {
namespace {

using abi::ncclProfilerEventDescr_v5_t;

// Key of a link: comm (16 bits), channel (8), peer (24), direction (1), plus a marker bit so
// that no valid key is 0 (the empty slot).
constexpr uint64_t kKeyMarker = uint64_t(1) << 63;

uint64_t linkKey(uint32_t comm, uint8_t channel, int peer, bool send) {
  return kKeyMarker | uint64_t(comm & 0xffff) << 33 | uint64_t(channel) << 25 |
         uint64_t(uint32_t(peer) & 0xffffff) << 1 | uint64_t(send);
}

uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdull;
  k ^= k >> 33;
  return k;
}

bool eq(const char* a, const char* b) { return a != nullptr && std::strcmp(a, b) == 0; }

uint8_t funcIndex(const char* f) {
  static constexpr const char* kNames[] = {"Broadcast", "Reduce",   "AllGather", "ReduceScatter",
                                           "AllReduce", "AlltoAll", "Gather",    "Scatter"};
  for (uint8_t i = 0; i < 8; ++i)
    if (eq(f, kNames[i])) return i;
  return kFuncOther;
}

uint8_t algoIndex(const char* a) {
  static constexpr const char* kNames[] = {
      "TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT"};
  for (uint8_t i = 0; i < 7; ++i)
    if (eq(a, kNames[i])) return i;
  return 7;
}

uint8_t protoIndex(const char* p) {
  if (eq(p, "LL")) return 0;
  if (eq(p, "LL128")) return 1;
  if (eq(p, "SIMPLE") || eq(p, "Simple")) return 2;
  return 3;
}

size_t typeSize(const char* t) {
  if (t == nullptr) return 0;
  size_t n = std::strlen(t);
  if (n >= 2 && std::strcmp(t + n - 2, "64") == 0) return 8;
  if (n >= 2 && std::strcmp(t + n - 2, "32") == 0) return 4;
  if (n >= 2 && std::strcmp(t + n - 2, "16") == 0) return 2;
  return 1;  // Int8, Uint8, Float8e4m3, Float8e5m2
}

int8_t phaseOf(int state) {
  switch (state) {
    case abi::ncclProfilerProxyStepSendGPUWait:
    case abi::ncclProfilerProxyStepRecvGPUWait:
      return int8_t(Phase::kGpu);
    case abi::ncclProfilerProxyStepSendPeerWait_v4:
      return int8_t(Phase::kPeer);
    case abi::ncclProfilerProxyStepSendWait:
    case abi::ncclProfilerProxyStepRecvWait:
      return int8_t(Phase::kNetwork);
    case abi::ncclProfilerProxyStepRecvFlushWait:
      return int8_t(Phase::kFlush);
  }
  return -1;
}

void atomicMin(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (v < cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}
void atomicMax(std::atomic<uint64_t>& a, uint64_t v) {
  uint64_t cur = a.load(std::memory_order_relaxed);
  while (v > cur && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

}  // namespace

ProfilerCore::ProfilerCore(Clock clock, pid_t self) : clock_(clock), self_(self) {}

void ProfilerCore::decodeKey(uint64_t key, LinkCounters& c) {
  c.comm = uint32_t(key >> 33) & 0xffff;
  c.channel = uint8_t(key >> 25);
  uint32_t peer = uint32_t(key >> 1) & 0xffffff;
  c.peer = (peer & 0x800000) ? int(peer | 0xff000000u) : int(peer);  // sign of -1 peers
  c.send = key & 1;
}

void* ProfilerCore::open(uint64_t comm_id, int nranks, int nnodes, int rank) {
  uint32_t index = next_comm_.fetch_add(1, std::memory_order_relaxed);
  if (index >= kMaxComms) return &comms_[0];  // closed: its events are dropped
  Comm& c = comms_[index];
  c.comm_id = comm_id;
  c.rank = rank;
  c.nranks = nranks;
  c.nnodes = nnodes;
  c.open.store(true, std::memory_order_release);
  return &c;
}

void ProfilerCore::close(void* ctx) {
  if (Comm* c = commOf(ctx)) c->open.store(false, std::memory_order_release);
}

ProfilerCore::Comm* ProfilerCore::commOf(void* ctx) {
  auto a = reinterpret_cast<uintptr_t>(ctx), base = reinterpret_cast<uintptr_t>(comms_.data());
  if (a < base || a >= base + sizeof(comms_) || (a - base) % sizeof(Comm) != 0) return nullptr;
  Comm* c = static_cast<Comm*>(ctx);
  return c->open.load(std::memory_order_acquire) ? c : nullptr;
}

CommInfo ProfilerCore::comm(uint32_t index) const {
  if (index == 0 || index >= kMaxComms) return {};
  const Comm& c = comms_[index];
  return {c.comm_id, c.rank, c.nranks, c.nnodes};
}

uint32_t ProfilerCore::linkFor(uint32_t comm, uint8_t channel, int peer, bool send) {
  const uint64_t key = linkKey(comm, channel, peer, send);
  size_t at = mix(key) & (kMaxLinks - 1);
  for (size_t probe = 0; probe < 64; ++probe, at = (at + 1) & (kMaxLinks - 1)) {
    uint64_t cur = links_[at].key.load(std::memory_order_acquire);
    if (cur == key) return uint32_t(at + 1);
    if (cur == 0) {
      if (links_[at].key.compare_exchange_strong(cur, key, std::memory_order_acq_rel))
        return uint32_t(at + 1);
      if (cur == key) return uint32_t(at + 1);
    }
  }
  drop(Drop::kTableFull);
  return 0;
}

void* ProfilerCore::start(void* ctx, const ncclProfilerEventDescr_v5_t* d) {
  if (d == nullptr) return nullptr;
  const uint64_t now = clock_();
  switch (d->type) {
    case abi::ncclProfileColl: {
      Comm* comm = commOf(ctx);
      if (comm == nullptr) return nullptr;
      Coll* c = colls_.alloc();
      if (c == nullptr) {
        drop(Drop::kPoolFull);
        return nullptr;
      }
      c->comm = uint32_t(comm - comms_.data());
      c->func = funcIndex(d->coll.func);
      c->algo = algoIndex(d->coll.algo);
      c->proto = protoIndex(d->coll.proto);
      c->channels = d->coll.nChannels;
      uint64_t bytes = uint64_t(d->coll.count) * typeSize(d->coll.datatype);
      // nccl-tests sizes: allgather and reducescatter move every rank's share.
      if (c->func == 2 || c->func == 3) bytes *= uint64_t(comm->nranks > 0 ? comm->nranks : 1);
      c->bytes = bytes;
      c->start_ns = now;
      c->children.store(0, std::memory_order_relaxed);
      c->last_child_ns.store(now, std::memory_order_relaxed);
      c->gpu_start.store(~uint64_t(0), std::memory_order_relaxed);
      c->gpu_stop.store(0, std::memory_order_relaxed);
      c->kernels_done.store(0, std::memory_order_relaxed);
      c->stopped.store(false, std::memory_order_relaxed);
      c->refs.store(1, std::memory_order_relaxed);
      c->live.store(true, std::memory_order_release);
      return c;
    }
    case abi::ncclProfileProxyOp: {
      const int ch = d->proxyOp.channelId;
      const bool send = d->proxyOp.isSend != 0;
      uint32_t comm_index = 0;  // pxn
      Coll* parent = nullptr;
      if (d->proxyOp.pid == self_) {
        Comm* comm = commOf(ctx);
        if (comm == nullptr) return nullptr;
        comm_index = uint32_t(comm - comms_.data());
        if (auto at = colls_.locate(d->parentObj); at && at->second == 0)
          parent = &colls_.at(at->first);
      }
      Op* op = ops_.alloc();
      if (op == nullptr) {
        drop(Drop::kPoolFull);
        return nullptr;
      }
      op->link = linkFor(comm_index, uint8_t(ch), d->proxyOp.peer, send);
      op->send = send;
      op->coll = -1;
      for (Step& s : op->steps) s = Step{};
      if (parent != nullptr && attach(*parent)) op->coll = int32_t(colls_.index(parent));
      return op;
    }
    case abi::ncclProfileProxyStep: {
      auto at = ops_.locate(d->parentObj);
      if (!at || at->second != 0) {
        if (d->parentObj != nullptr) drop(Drop::kUnknownHandle);
        return nullptr;
      }
      Op& op = ops_.at(at->first);
      Step& s = op.steps[size_t(d->proxyStep.step < 0 ? 0 : d->proxyStep.step) % kSteps];
      if (s.active) stopStep(op, s, now);  // NCCL reused the slot without a stop
      s.active = true;
      s.bytes_counted = false;
      s.phase = -1;
      s.mark_ns = now;
      if (op.link) links_[op.link - 1].started.fetch_add(1, std::memory_order_relaxed);
      return &s;
    }
    case abi::ncclProfileKernelCh: {
      auto at = colls_.locate(d->parentObj);
      if (!at || at->second != 0 || d->kernelCh.channelId >= kMaxChannels) return nullptr;
      Coll& c = colls_.at(at->first);
      if (!attach(c)) return nullptr;
      atomicMin(c.gpu_start, d->kernelCh.pTimer);
      c.kernel[d->kernelCh.channelId] = d->kernelCh.pTimer;
      return &c.kernel[d->kernelCh.channelId];
    }
    default:
      return nullptr;  // group, API, p2p, proxy control, net plugin events: not needed
  }
}

void ProfilerCore::stopStep(Op& op, Step& s, uint64_t now) {
  if (!s.active) return;
  if (op.link) {
    Link& l = links_[op.link - 1];
    if (s.phase >= 0)
      l.wait_ns[size_t(s.phase)].fetch_add(now - s.mark_ns, std::memory_order_relaxed);
    l.stopped.fetch_add(1, std::memory_order_relaxed);
  }
  s.active = false;
}

bool ProfilerCore::attach(Coll& c) {
  int32_t r = c.refs.load(std::memory_order_acquire);
  do {
    if (r < 0 || !c.live.load(std::memory_order_relaxed)) return false;
  } while (!c.refs.compare_exchange_weak(r, r + 1, std::memory_order_acq_rel));
  c.children.fetch_add(1, std::memory_order_relaxed);
  return true;
}

void ProfilerCore::release(Coll& c, uint64_t now) {
  atomicMax(c.last_child_ns, now);
  if (c.refs.fetch_sub(1, std::memory_order_acq_rel) != 1) return;
  // Last one out: complete now if every channel's kernel reported, else leave it to sweep().
  if (c.channels == 0 || c.kernels_done.load(std::memory_order_acquire) < c.channels) return;
  int32_t zero = 0;
  if (c.refs.compare_exchange_strong(zero, -1, std::memory_order_acq_rel)) complete(c);
}

void ProfilerCore::complete(Coll& c) {
  Completion done;
  done.comm = c.comm;
  done.func = c.func;
  done.algo = c.algo;
  done.proto = c.proto;
  done.channels = c.channels;
  done.bytes = c.bytes;
  uint64_t g0 = c.gpu_start.load(std::memory_order_relaxed);
  uint64_t g1 = c.gpu_stop.load(std::memory_order_relaxed);
  if (g1 > g0 && g0 != ~uint64_t(0)) {
    done.duration_ns = g1 - g0;
    done.gpu_timed = true;
  } else if (c.children.load(std::memory_order_relaxed) > 0) {
    uint64_t last = c.last_child_ns.load(std::memory_order_relaxed);
    done.duration_ns = last > c.start_ns ? last - c.start_ns : 0;
  }
  if (!done_.push(done)) drop(Drop::kRingFull);
  c.live.store(false, std::memory_order_release);
  colls_.free(&c);
}

void ProfilerCore::sweep(uint64_t quiet_ns) {
  const uint64_t now = clock_();
  for (size_t i = 0; i < kMaxColls; ++i) {
    Coll& c = colls_.at(i);
    if (!c.live.load(std::memory_order_acquire) || !c.stopped.load(std::memory_order_acquire))
      continue;
    if (now - c.last_child_ns.load(std::memory_order_relaxed) < quiet_ns) continue;
    int32_t zero = 0;
    if (c.refs.compare_exchange_strong(zero, -1, std::memory_order_acq_rel)) complete(c);
  }
}

void ProfilerCore::stop(void* handle) {
  if (handle == nullptr) return;
  const uint64_t now = clock_();
  if (auto at = colls_.locate(handle)) {
    Coll& c = colls_.at(at->first);
    if (!c.live.load(std::memory_order_acquire) || c.refs.load(std::memory_order_acquire) <= 0)
      return drop(Drop::kUnknownHandle);
    if (at->second == 0) {
      // Enqueued, not finished: its children (KernelCh, ProxyOps) say when it ends.
      c.stopped.store(true, std::memory_order_release);
      atomicMax(c.last_child_ns, now);
      if (c.refs.fetch_sub(1, std::memory_order_acq_rel) == 1 && c.channels > 0 &&
          c.kernels_done.load(std::memory_order_acquire) >= c.channels) {
        int32_t zero = 0;
        if (c.refs.compare_exchange_strong(zero, -1, std::memory_order_acq_rel)) complete(c);
      }
      return;
    }
    if (at->second >= offsetof(Coll, kernel)) {  // KernelCh
      c.kernels_done.fetch_add(1, std::memory_order_acq_rel);
      return release(c, now);
    }
    return drop(Drop::kUnknownHandle);
  }
  if (auto at = ops_.locate(handle)) {
    Op& op = ops_.at(at->first);
    if (at->second == 0) {
      for (Step& s : op.steps) stopStep(op, s, now);
      if (op.coll >= 0) release(colls_.at(size_t(op.coll)), now);
      op.coll = -1;
      ops_.free(&op);
      return;
    }
    if (at->second >= offsetof(Op, steps)) {
      size_t i = (at->second - offsetof(Op, steps)) / sizeof(Step);
      return stopStep(op, op.steps[i], now);
    }
  }
  drop(Drop::kUnknownHandle);
}

void ProfilerCore::record(void* handle, int state, const abi::ncclProfilerEventStateArgs_t* args) {
  if (handle == nullptr) return;
  if (auto at = ops_.locate(handle); at && at->second >= offsetof(Op, steps)) {
    Op& op = ops_.at(at->first);
    Step& s = op.steps[(at->second - offsetof(Op, steps)) / sizeof(Step)];
    int8_t phase = phaseOf(state);
    if (!s.active || phase < 0) return;
    const uint64_t now = clock_();
    if (op.link) {
      Link& l = links_[op.link - 1];
      if (s.phase >= 0)
        l.wait_ns[size_t(s.phase)].fetch_add(now - s.mark_ns, std::memory_order_relaxed);
      // Bytes once per step: when the send is posted or the data has arrived.
      if (!s.bytes_counted && args != nullptr &&
          (state == abi::ncclProfilerProxyStepSendWait ||
           state == abi::ncclProfilerProxyStepRecvFlushWait)) {
        l.bytes.fetch_add(args->proxyStep.transSize, std::memory_order_relaxed);
        s.bytes_counted = true;
      }
    }
    s.phase = phase;
    s.mark_ns = now;
    return;
  }
  if (auto at = colls_.locate(handle); at && at->second >= offsetof(Coll, kernel)) {
    if (state == abi::ncclProfilerKernelChStop && args != nullptr)
      atomicMax(colls_.at(at->first).gpu_stop, args->kernelCh.pTimer);
  }
}

}  // namespace bpftrain::nccl_plugin
