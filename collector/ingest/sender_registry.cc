#include "collector/ingest/sender_registry.h"

#include <cstring>

namespace bpftrain::collector::ingest {

bool SenderRegistry::update(uint64_t sender_id, const wire::HelloView& hello, int64_t now_ns,
                            const SocketAddress* from) {
  std::lock_guard lock(mutex_);
  auto it = senders_.find(sender_id);
  if (it == senders_.end()) {
    if (senders_.size() >= max_senders_) return false;
    it = senders_.emplace(sender_id, Sender{}).first;
    it->second.sender_id = sender_id;
    ++version_;
  }
  Sender& s = it->second;
  s.last_seen_ns = now_ns;
  if (from != nullptr && from->length > 0 &&
      (from->length != s.address.length ||
       std::memcmp(&from->storage, &s.address.storage, from->length) != 0)) {
    s.address = *from;
    ++version_;
  }
  // Hellos repeat every few seconds; only a real change bumps the version so the loader can skip
  // re-targeting when nothing moved.
  bool changed = s.job != hello.job || s.node != hello.node || s.rank != hello.rank ||
                 s.world != hello.world || s.pid != pid_t(hello.pid) ||
                 s.tids.size() != hello.tidCount();
  for (size_t i = 0; !changed && i < hello.tidCount(); ++i)
    changed = s.tids[i] != pid_t(hello.tid(i));
  if (!changed) return true;
  s.job.assign(hello.job);
  s.node.assign(hello.node);
  s.rank = hello.rank;
  s.world = hello.world;
  s.pid = pid_t(hello.pid);
  s.tids.resize(hello.tidCount());
  for (size_t i = 0; i < hello.tidCount(); ++i) s.tids[i] = pid_t(hello.tid(i));
  ++version_;
  return true;
}

bool SenderRegistry::markNccl(uint64_t sender_id) {
  std::lock_guard lock(mutex_);
  auto it = senders_.find(sender_id);
  if (it == senders_.end()) return false;
  if (!it->second.nccl) {
    it->second.nccl = true;
    ++version_;
  }
  return true;
}

bool SenderRegistry::labelsOf(uint64_t sender_id, std::string& job, std::string& rank) const {
  std::lock_guard lock(mutex_);
  auto it = senders_.find(sender_id);
  if (it == senders_.end()) return false;
  job = it->second.job;
  rank = std::to_string(it->second.rank);
  return true;
}

size_t SenderRegistry::expireIdle(int64_t before_ns) {
  std::lock_guard lock(mutex_);
  size_t removed =
      std::erase_if(senders_, [&](const auto& e) { return e.second.last_seen_ns < before_ns; });
  if (removed > 0) {
    ++version_;
    expiries_.fetch_add(1, std::memory_order_release);
  }
  return removed;
}

std::vector<Sender> SenderRegistry::snapshot() const {
  std::lock_guard lock(mutex_);
  std::vector<Sender> out;
  out.reserve(senders_.size());
  for (const auto& [id, s] : senders_) out.push_back(s);
  return out;
}

size_t SenderRegistry::size() const {
  std::lock_guard lock(mutex_);
  return senders_.size();
}

uint64_t SenderRegistry::version() const {
  std::lock_guard lock(mutex_);
  return version_;
}

}  // namespace bpftrain::collector::ingest
