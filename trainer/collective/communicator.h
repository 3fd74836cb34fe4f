// Data-parallel collectives for the trainer. One Communicator per rank; allreduce() dispatches by
// topology to one file per algorithm (allreduce_<algorithm>.cc). Every algorithm produces
// bit-identical results on every rank, so parameters never diverge across a live switch.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/training_config.h"

namespace bpftrain::trainer::collective {

struct CommOptions {
  int rank = 0;
  int world = 1;
  // Rendezvous: a directory (file store, one host or a shared filesystem) or redis HOST:PORT.
  std::string store;
  std::string prefix = "bpftrain";  // store key prefix, so several jobs can share a store
  // Address or interface this rank's transport binds to (a netns IP in netlab); empty: 127.0.0.1.
  std::string bind_address;
  // "tcp" (Gloo's TCP transport on bind_address) or "ibverbs" (Gloo's ibverbs transport: an RDMA
  // device, InfiniBand or RoCE; soft-RoCE rxe in numalab). Over ibverbs Gloo has bound buffers
  // only: the ring (and hierarchical's leaders) run a bound-buffer ring there, hierarchical's
  // node stage stays on the host (shared memory; TCP on bind_address for its set-up).
  std::string transport = "tcp";
  std::string rdma_device;  // ibverbs: device name as ibv_devices lists it; empty: the only one
  int rdma_port = 1;        // ibverbs: port of the device
  int gid_index = 0;        // ibverbs: GID table index (RoCE v2 over IPv4 is often 1 or 3)
  // node_of[r] = node index of rank r (for hierarchical); empty: every rank on its own node.
  std::vector<int> node_of;
  std::chrono::milliseconds timeout = std::chrono::seconds(30);  // rendezvous and dead peers
  size_t max_elements =
      0;  // largest allreduce, so buffers are sized (and pairs' send buffers) up front
  // Hierarchical: ranks of one node reduce through POSIX shared memory when they can all map it
  // (else TCP, logged once and reported by nodeStage()).
  bool shared_memory = true;
};

class Communicator {
 public:
  // Throws std::runtime_error with a message that names the fix (store unreachable, timeout...).
  static std::unique_ptr<Communicator> create(const CommOptions& options);
  virtual ~Communicator() = default;

  // In-place sum across ranks; no allocation per call once buffers are sized.
  virtual void allreduce(std::span<float> data, Topology topology) = 0;
  // Before training: sets `topology` up for this buffer (what its algorithm allocates and
  // registers per buffer) without moving data, so that its first use in a step costs what later
  // ones do. Every rank calls it with the same buffers in the same order; the buffer's contents
  // are neither read nor written. By default nothing (NCCL sets itself up).
  virtual void warm(std::span<float> data, Topology topology) { (void)data, (void)topology; }
  virtual void broadcast(std::span<uint8_t> data, int root) = 0;
  virtual void barrier() = 0;
  // How the hierarchical topology's node stage runs on this rank: "shm", "tcp", "tcp (shared
  // memory unavailable: why)", or "none" (alone on its node). For a log line and a metric.
  virtual std::string nodeStage() const { return "tcp"; }
  virtual int rank() const = 0;
  virtual int world() const = 0;
};

inline constexpr std::string_view kTransports[] = {"tcp", "ibverbs"};

// Why `topology` cannot run over `transport` (one line naming the topologies that can), or ""
// when it can.
std::string topologyUnsupported(Topology topology, std::string_view transport);

// nccl-tests convention: algbw = bytes / time; busbw = algbw * 2 (n-1) / n for allreduce.
inline double busBandwidth(double bytes, double seconds, int world) {
  if (seconds <= 0 || world <= 0) return 0;
  return bytes / seconds * 2.0 * (world - 1) / world;
}

}  // namespace bpftrain::trainer::collective
