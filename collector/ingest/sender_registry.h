// Who is sending: ranks announce themselves in hello frames (job, rank, node, pid, tids).
// The BPF loader reads this registry to target the training processes; the exporter uses it to
// turn a pid into the rank's job/rank labels (never a pid label).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/host_port.h"
#include "common/wire_format.h"

namespace bpftrain::collector::ingest {

struct Sender {
  uint64_t sender_id = 0;
  std::string job;
  std::string node;
  uint32_t rank = 0;
  uint32_t world = 0;
  pid_t pid = 0;
  std::vector<pid_t> tids;
  int64_t last_seen_ns = 0;
  // Where its hello came from (length 0: unknown, e.g. a test feeding the dispatcher directly):
  // the NCCL controller answers a plugin there, on the socket its frames leave from.
  SocketAddress address;
  bool nccl = false;  // it sent labelled samples: an NCCL plugin rank (plugins/nccl)
};

class SenderRegistry {
 public:
  explicit SenderRegistry(size_t max_senders = 100'000) : max_senders_(max_senders) {}

  // Returns false when the registry is full (the hello is counted as dropped by the caller).
  bool update(uint64_t sender_id, const wire::HelloView& hello, int64_t now_ns,
              const SocketAddress* from = nullptr);
  // Marks a sender that sent labelled samples (the NCCL plugin's frames); false if unknown.
  bool markNccl(uint64_t sender_id);
  // Labels of a sender seen in a samples frame; false if it never said hello.
  bool labelsOf(uint64_t sender_id, std::string& job, std::string& rank) const;

  // Forgets senders whose last hello is older than `before_ns` (ranks of jobs that ended), so
  // jobs coming and going for weeks never fill the registry; returns how many. Ranks repeat
  // their hello every few seconds, so a live one is never idle that long.
  size_t expireIdle(int64_t before_ns);
  // Bumped by every expireIdle() that removed someone: dispatchers then drop their cached state.
  uint64_t expiries() const { return expiries_.load(std::memory_order_acquire); }

  std::vector<Sender> snapshot() const;
  size_t size() const;
  // Bumped on every change of membership or tids, so readers can skip unchanged snapshots.
  uint64_t version() const;

 private:
  mutable std::mutex mutex_;
  size_t max_senders_;
  uint64_t version_ = 0;
  std::atomic<uint64_t> expiries_{0};
  std::unordered_map<uint64_t, Sender> senders_;
};

}  // namespace bpftrain::collector::ingest
