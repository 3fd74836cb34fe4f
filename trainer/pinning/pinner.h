// CPU and memory placement of a rank's threads with hwloc. Modes (common/training_config.h):
//   none     every thread may run on every allowed PU; memory policy default.
//   compact  ranks are packed onto consecutive PUs (hwloc logical order keeps cores and LLCs
//            contiguous): local rank r gets PUs [r*n/N, r*n/N + max(1, n/N)) cut to the LLC of the
//            first, and ALL its threads share that slice (compute and communication close
//            together).
//   spread   ranks are interleaved over the whole machine: rank r owns PUs r, r+N, r+2N... (or PU
//            r mod n when ranks outnumber PUs); the compute thread runs on the first of them and
//            the communication threads on the others (on the same PU when there is no other).
//   numa     rank r lives on NUMA node r*nodes/N: threads on the node's PUs, and the model buffers
//            bound there (hwloc membind, existing pages migrated on a switch); the process's
//            other anonymous memory prefers the node and moves there, and so do the main
//            thread's new allocations (both undone when the rank leaves numa).
// A switch re-pins at a step boundary; plan() is pure, apply() touches the threads.
#pragma once

#include <sys/types.h>

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/training_config.h"

namespace bpftrain::trainer::pinning {

struct PinPlan {
  std::vector<int> compute_cpus;  // OS CPU numbers, ascending
  std::vector<int> comm_cpus;
  int numa_node = -1;  // OS node index whose memory the buffers are bound to; -1: default
};

struct MemoryRegion {
  void* address = nullptr;
  size_t bytes = 0;
};

class Pinner {
 public:
  // local_rank/local_world: this rank's place among the ranks on this host.
  // Throws std::runtime_error when hwloc cannot load the topology.
  Pinner(int local_rank, int local_world);
  ~Pinner();
  Pinner(const Pinner&) = delete;
  Pinner& operator=(const Pinner&) = delete;

  PinPlan plan(PinMode mode) const;
  // Binds every tid in `compute` and `comm` per plan(mode), and (numa mode) the regions' memory.
  // Threads that exited meanwhile are skipped. Returns false with `error` on the first real
  // failure.
  bool apply(PinMode mode, std::span<const pid_t> compute, std::span<const pid_t> comm,
             std::span<const MemoryRegion> regions, std::string& error);

  // After a move into numa: errno of an mbind that failed on the process's other anonymous
  // memory (0 when every mapping was placed).
  int lastMigrateError() const { return last_migrate_error_; }

  int puCount() const { return int(pus_.size()); }
  int numaNodeCount() const { return numa_nodes_; }
  std::vector<int> allowedCpus() const { return pus_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int local_rank_;
  int local_world_;
  std::vector<int> pus_;  // OS indices of allowed PUs in hwloc logical order
  int numa_nodes_ = 1;
  int last_migrate_error_ = 0;
  int anon_node_ = -1;  // the node the anonymous mappings prefer (-1: default policy)

  // A node mask as the mempolicy system calls take it (maxnode = kMaxNodes).
  struct NodeMask {
    static constexpr int kMaxNodes = 1024;
    static constexpr int kBits = 8 * sizeof(unsigned long);
    unsigned long bits[kMaxNodes / kBits] = {};
    void set(int node) { bits[node / kBits] |= 1UL << (node % kBits); }
  };
  struct SavedPolicy {
    int mode = 0;
    NodeMask nodes;
  };
  std::optional<SavedPolicy> saved_policy_;  // the calling thread's policy before any apply()
  bool thread_policy_set_ = false;

  void placeAnonymousMemory(int node);  // node < 0: back to the default policy
  void setThreadPolicy(int node);       // node < 0: back to the saved policy
};

// Thread ids of this process (/proc/self/task), ascending.
std::vector<pid_t> listThreads();
// CPUs a thread may run on (sched_getaffinity), ascending OS numbers.
std::vector<int> affinityOf(pid_t tid);

}  // namespace bpftrain::trainer::pinning
