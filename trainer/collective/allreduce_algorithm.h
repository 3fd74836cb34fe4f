// One allreduce algorithm over Gloo contexts; one implementation file per algorithm
// (allreduce_<algorithm>.cc). The communicator owns one instance per topology and dispatches by
// enum.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace gloo {
class Context;
}

namespace bpftrain::trainer::collective {

class AllreduceAlgorithm {
 public:
  virtual ~AllreduceAlgorithm() = default;
  // In-place sum; the result is bit-identical on every rank.
  virtual void run(std::span<float> data) = 0;
  // Before training, on every rank in the same order: whatever the algorithm sets up per buffer
  // (allocates, zeroes, registers with its peers) done now, without moving data (the trainer's
  // RankRunner::warmTopologies says why). By default nothing: the ring and hierarchical register
  // an unbound buffer on first use, which costs microseconds.
  virtual void warm(std::span<float> data) { (void)data; }
};

// Ring reduce-scatter + allgather over unbound buffers, pipelined in segments (ours, not Gloo's
// AllreduceRing, whose per-rank summation order differs and is therefore not bit-identical).
std::unique_ptr<AllreduceAlgorithm> makeRingAllreduce(std::shared_ptr<gloo::Context> context);

// The same ring over bound buffers (ibverbs, whose Gloo transport has no unbound ones).
std::unique_ptr<AllreduceAlgorithm> makeBoundRingAllreduce(std::shared_ptr<gloo::Context> context);

// Gloo's AllreduceHalvingDoubling (recursive halving reduce-scatter, doubling allgather).
std::unique_ptr<AllreduceAlgorithm> makeHalvingDoublingAllreduce(
    std::shared_ptr<gloo::Context> context);

// Gloo's AllreduceBcube; the group base is the context's base (see bcubeBase()).
std::unique_ptr<AllreduceAlgorithm> makeBcubeAllreduce(std::shared_ptr<gloo::Context> context);

struct HierarchicalConfig {
  // Pipeline chunk of both node stages. One size for both: the leaders' rings must see the same
  // chunks whether their node reduced through shared memory or TCP.
  size_t chunk_elements = 256 * 1024;
  // With a single node there is no leader ring to keep in step: shared-memory chunks small enough
  // that every rank's slot and the result stay in cache (measured faster than 1-4 MiB chunks).
  size_t single_node_shm_chunk_elements = 64 * 1024;
  bool shared_memory = true;            // try POSIX shm for the node stage
  bool multi_node = false;              // more than one node: leaders run a ring
  bool bound_leader_ring = false;       // the leaders' ring on bound buffers (ibverbs)
  std::vector<int> node_world_ranks;    // world rank of each node-context rank (for messages)
  std::vector<int> leader_world_ranks;  // world rank of each leader-context rank (for messages)
};

// Reduce within a node, allreduce among node leaders, broadcast within the node, pipelined in
// chunks. node_context: the ranks of this rank's node (null if alone on its node);
// leader_context: one rank per node (null on non-leaders or when there is a single node).
// Constructing it is collective over node_context (the shared-memory set-up).
std::unique_ptr<AllreduceAlgorithm> makeHierarchicalAllreduce(
    std::shared_ptr<gloo::Context> node_context, std::shared_ptr<gloo::Context> leader_context,
    const HierarchicalConfig& config, std::string* node_stage);

// Gloo's bcube needs the world size divisible by the base; we use the smallest b with world = b^k
// (a full hypercube), otherwise world itself (one step: direct reduce-scatter + allgather).
int bcubeBase(int world);

}  // namespace bpftrain::trainer::collective
