// A training rank rank discovery found on this host: what the BPF loader needs to give it a target
// slot (ProbeService::setDiscovered), as a hello gives one to a rank bpftrain-train launched.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace bpftrain::collector::discovery {

struct DiscoveredRank {
  std::string job;          // the job's id from its launcher's environment (rank_environment.h)
  std::string rank;         // the rank's number in the job's world
  std::vector<pid_t> pids;  // sorted: the rank's process and the children that inherited its
                            // environment (data loader workers); never a label
  bool operator==(const DiscoveredRank&) const = default;
};

}  // namespace bpftrain::collector::discovery
