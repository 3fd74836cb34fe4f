// Shared memory for the ranks of one host: per-rank staging slots, a result area and a
// process-shared barrier (futex on an atomic in the mapping). The hierarchical topology reduces
// through it instead of TCP when every rank of a node can attach the same segment.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace gloo {
class Context;
}

namespace bpftrain::trainer::collective {

class NodeShm {
 public:
  // Collective over node_context (leader = local rank 0 creates, members attach). Returns null
  // with *why set when any rank could not attach (e.g. ranks of one "node" on different hosts or
  // mount namespaces); the caller falls back to TCP.
  static std::unique_ptr<NodeShm> create(gloo::Context& node, size_t chunk_elements,
                                         std::string* why);
  ~NodeShm();

  int localRank() const { return local_rank_; }
  int size() const { return size_; }
  size_t chunkElements() const { return chunk_; }
  float* slot(int local_rank, int parity);
  float* result(int parity);
  float* resultBase() { return result(0); }
  size_t resultBytes() const { return 2 * chunk_ * sizeof(float); }

  // All ranks of the node; throws std::runtime_error on timeout or when another rank aborted.
  void barrier(std::chrono::milliseconds timeout);
  // Tell the other ranks this one failed, so their barrier throws now rather than at timeout.
  void abort();

 private:
  struct Header;
  NodeShm(void* base, size_t bytes, int local_rank, int size, size_t chunk);

  void* base_;
  size_t bytes_;
  int local_rank_;
  int size_;
  size_t chunk_;
  Header* header_;
  float* data_;
};

}  // namespace bpftrain::trainer::collective
