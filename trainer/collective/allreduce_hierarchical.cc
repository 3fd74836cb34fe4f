// Hierarchical allreduce: members of a node send their data to the node leader (lowest rank of
// the node), the leader sums them in member order, leaders run a ring allreduce among themselves,
// and each leader sends the result back to its members. Work is pipelined in chunks: while the
// leaders' ring runs on chunk c, members' chunk c+1 is already on its way to the leader.
// Bit-identical: each node sum has a fixed order, the leader ring is bit-identical, members copy.
// When every rank of a node can map one POSIX shared-memory segment, the node stage runs through
// it instead of TCP: each rank copies its chunk into its slot, each rank sums one slice of the
// chunk over all slots (local rank order), the leader runs the ring on the summed chunk, and
// everyone copies the result out. Sums are still formed once, in a fixed order.
// Over ibverbs the leaders' ring runs on bound buffers (BoundRingAllreduce); the node stage stays
// on the host (shared memory, or TCP on the node context the communicator makes over loopback).
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <stdexcept>
#include <string>

#include "trainer/collective/allreduce_algorithm.h"
#include "trainer/collective/allreduce_ring.h"
#include "trainer/collective/buffer_cache.h"
#include "trainer/collective/reduce_sum.h"
#include "trainer/collective/shm_node.h"

namespace bpftrain::trainer::collective {
namespace {

constexpr uint64_t kReduceSlot = 0xB7000002ull << 24;
constexpr uint64_t kBroadcastSlot = 0xB7000003ull << 24;
constexpr uint64_t kLeaderRingSlot = 0xB7000004ull << 24;

class HierarchicalAllreduce final : public AllreduceAlgorithm {
 public:
  HierarchicalAllreduce(std::shared_ptr<gloo::Context> node, std::shared_ptr<gloo::Context> leaders,
                        const HierarchicalConfig& config, std::string* node_stage)
      : node_(std::move(node)),
        chunk_(std::max<size_t>(1, config.chunk_elements)),
        multi_node_(config.multi_node),
        node_world_ranks_(config.node_world_ranks) {
    if (leaders && leaders->size > 1) {
      leader_timeout_ = leaders->getTimeout();
      if (config.bound_leader_ring)
        bound_ring_ =
            std::make_unique<BoundRingAllreduce>(std::move(leaders), config.leader_world_ranks);
      else
        ring_ = std::make_unique<RingAllreduce>(std::move(leaders), kLeaderRingSlot,
                                                config.leader_world_ranks);
    }
    std::string stage = node_ && node_->size > 1 ? "tcp" : "none";
    if (node_ && node_->size > 1 && config.shared_memory) {
      std::string why;
      shm_ = NodeShm::create(*node_, multi_node_ ? chunk_ : config.single_node_shm_chunk_elements,
                             &why);
      if (shm_) {
        stage = "shm";
        if (ring_)
          shm_ring_buf_ =
              ring_->context().createUnboundBuffer(shm_->resultBase(), shm_->resultBytes());
      } else {
        stage = "tcp (shared memory unavailable: " + why + ")";
      }
    }
    if (node_stage) *node_stage = stage;
    if (node_ && node_->size > 1 && node_->rank == 0 && !shm_) {
      for (int m = 1; m < node_->size; ++m) {
        auto& s = scratch_.emplace_back();
        s.data.resize(2 * chunk_);
        s.buf = node_->createUnboundBuffer(s.data.data(), s.data.size() * sizeof(float));
      }
    }
  }

  void run(std::span<float> data) override {
    try {
      runStages(data);
    } catch (const gloo::Exception& e) {
      std::string who;
      for (int r : node_world_ranks_) who += (who.empty() ? "" : ",") + std::to_string(r);
      throw std::runtime_error(std::string(e.what()) + " [hierarchical node stage, node ranks " +
                               who + "]");
    }
  }

 private:
  void runStages(std::span<float> data) {
    if (data.empty()) return;
    if (shm_) {
      runShm(data);
      return;
    }
    if (!node_ || node_->size == 1) {
      // Alone on its node: still chunk exactly like the other leaders so the rings match.
      if (ring_ || bound_ring_) runLeader(data, nullptr);
      return;
    }
    auto& nbuf = node_buffers_.get(data.data(), data.size(), [&] {
      return node_->createUnboundBuffer(data.data(), data.size_bytes());
    });
    if (node_->rank == 0) {
      runLeader(data, &nbuf);
    } else {
      runMember(data, nbuf);
    }
  }

  struct Scratch {
    std::vector<float> data;
    std::unique_ptr<gloo::transport::UnboundBuffer> buf;
  };

  size_t chunks(size_t n) const { return (n + chunk_ - 1) / chunk_; }

  void runShm(std::span<float> data) {
    const auto timeout = node_->getTimeout();
    const size_t chunk = shm_->chunkElements();
    const int m = shm_->size(), j = shm_->localRank();
    try {
      for (size_t c = 0, off = 0; off < data.size(); ++c, off += chunk) {
        const int p = int(c & 1);  // two parities: chunk c+1 never overwrites what c still reads
        const size_t len = std::min(chunk, data.size() - off);
        std::memcpy(shm_->slot(j, p), data.data() + off, len * sizeof(float));
        shm_->barrier(timeout);
        // This rank's slice of the chunk, summed over the node in local rank order.
        const size_t begin = len * size_t(j) / size_t(m), end = len * size_t(j + 1) / size_t(m);
        float* result = shm_->result(p);
        std::memcpy(result + begin, shm_->slot(0, p) + begin, (end - begin) * sizeof(float));
        for (int r = 1; r < m; ++r) sumInto(result + begin, shm_->slot(r, p) + begin, end - begin);
        shm_->barrier(timeout);
        if (multi_node_) {
          if (ring_) ring_->runRange(*shm_ring_buf_, size_t(p) * chunk, len);
          if (bound_ring_) bound_ring_->runRange(result, len);
          shm_->barrier(timeout);
        }
        std::memcpy(data.data() + off, result, len * sizeof(float));
      }
    } catch (...) {
      shm_->abort();
      throw;
    }
  }

  void runMember(std::span<float> data, gloo::transport::UnboundBuffer& nbuf) {
    const auto timeout = node_->getTimeout();
    const size_t nchunks = chunks(data.size());
    // Receives first, so the leader's answers go straight out. Safe to receive into the memory we
    // send from: the leader only answers chunk c after it has read our chunk c completely.
    for (size_t c = 0; c < nchunks; ++c) {
      const size_t off = c * chunk_, len = std::min(chunk_, data.size() - off);
      nbuf.recv(0, kBroadcastSlot, off * sizeof(float), len * sizeof(float));
    }
    for (size_t c = 0; c < nchunks; ++c) {
      const size_t off = c * chunk_, len = std::min(chunk_, data.size() - off);
      nbuf.send(0, kReduceSlot, off * sizeof(float), len * sizeof(float));
    }
    for (size_t c = 0; c < nchunks; ++c) nbuf.waitSend(timeout);
    for (size_t c = 0; c < nchunks; ++c) nbuf.waitRecv(timeout);
  }

  // nbuf: this buffer on the node context; null when the leader has no members.
  void runLeader(std::span<float> data, gloo::transport::UnboundBuffer* nbuf) {
    const auto timeout = node_ ? node_->getTimeout() : leader_timeout_;
    const size_t nchunks = chunks(data.size());
    gloo::transport::UnboundBuffer* lbuf = nullptr;
    if (ring_) {
      lbuf = &leader_buffers_.get(data.data(), data.size(), [&] {
        return ring_->context().createUnboundBuffer(data.data(), data.size_bytes());
      });
    }
    auto postRecv = [&](size_t c) {
      const size_t off = c * chunk_, len = std::min(chunk_, data.size() - off);
      for (size_t m = 0; m < scratch_.size(); ++m)
        scratch_[m].buf->recv(static_cast<int>(m + 1), kReduceSlot,
                              (c & 1) * chunk_ * sizeof(float), len * sizeof(float));
    };
    postRecv(0);
    size_t pending_sends = 0;
    for (size_t c = 0; c < nchunks; ++c) {
      if (c + 1 < nchunks) postRecv(c + 1);
      const size_t off = c * chunk_, len = std::min(chunk_, data.size() - off);
      for (auto& s : scratch_) {
        s.buf->waitRecv(timeout);
        sumInto(data.data() + off, s.data.data() + (c & 1) * chunk_, len);
      }
      if (ring_) ring_->runRange(*lbuf, off, len);
      if (bound_ring_) bound_ring_->runRange(data.data() + off, len);
      for (size_t m = 1; m <= scratch_.size(); ++m) {
        nbuf->send(int(m), kBroadcastSlot, off * sizeof(float), len * sizeof(float));
        ++pending_sends;
      }
    }
    for (; pending_sends > 0; --pending_sends) nbuf->waitSend(timeout);
  }

  std::shared_ptr<gloo::Context> node_;
  size_t chunk_;
  bool multi_node_;
  std::vector<int> node_world_ranks_;
  std::unique_ptr<RingAllreduce> ring_;             // leaders over unbound buffers (TCP)
  std::unique_ptr<BoundRingAllreduce> bound_ring_;  // leaders over bound buffers (ibverbs)
  std::chrono::milliseconds leader_timeout_{0};
  std::unique_ptr<NodeShm> shm_;
  std::unique_ptr<gloo::transport::UnboundBuffer> shm_ring_buf_;  // leader: shm result on ring
  std::vector<Scratch> scratch_;  // leader only: one double-buffered chunk per member
  BufferCache<gloo::transport::UnboundBuffer> node_buffers_{8};
  BufferCache<gloo::transport::UnboundBuffer> leader_buffers_{8};
};

}  // namespace

std::unique_ptr<AllreduceAlgorithm> makeHierarchicalAllreduce(
    std::shared_ptr<gloo::Context> node_context, std::shared_ptr<gloo::Context> leader_context,
    const HierarchicalConfig& config, std::string* node_stage) {
  return std::make_unique<HierarchicalAllreduce>(std::move(node_context), std::move(leader_context),
                                                 config, node_stage);
}

}  // namespace bpftrain::trainer::collective
