// The local launcher behind --ranks N: starts N rank processes of this same binary, forwards
// SIGINT/SIGTERM/SIGHUP to them, and when one rank fails stops the others (SIGTERM, then SIGKILL
// after the stop timeout) and exits non-zero naming that rank and its last error line. A rank can
// be placed into a network namespace (setns before exec) with its transport bound to the
// namespace's address; ranks sharing a namespace count as one node for pinning and hierarchical.
// With restarts > 0 a failed rank does not end the job: once every rank has stopped, all ranks
// start again with --resume (the newest valid checkpoint) in a fresh rendezvous directory, and
// the launcher prints the time from the failure to the first step the restarted job completed.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace bpftrain::trainer::launcher {

struct LaunchSpec {
  std::string executable;              // usually /proc/self/exe
  std::vector<std::string> rank_args;  // flags every rank gets (no --ranks/--netns/--rank...)
  int ranks = 1;
  std::string store;               // empty: a fresh temporary directory, removed afterwards
  std::vector<std::string> netns;  // empty or one per rank
  std::vector<int> node_of;        // empty: derived from netns (or all on node 0)
  std::chrono::milliseconds stop_timeout{10'000};
  int restarts = 0;  // attempts after the first; rank_args must then carry --checkpoint DIR
};

// Runs the ranks to completion; returns the exit code for the launcher process:
// 0 all succeeded, 1 a rank failed (or could not start) and no restart was left, 128+N after a
// forwarded signal N.
int runLauncher(const LaunchSpec& spec);

// Node index per rank from namespace names: ranks in the same namespace share a node.
std::vector<int> nodesFromNamespaces(const std::vector<std::string>& netns);

// The line rank 0 writes to stderr after the first step of a resumed run; the launcher times
// restarts by it.
inline constexpr const char* kFirstResumedStepMarker = "first resumed step done:";

}  // namespace bpftrain::trainer::launcher
