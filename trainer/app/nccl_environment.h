// What --backend nccl puts in the process environment before NCCL starts (NCCL and its plugins
// read settings only from there). A pure function of the options and the environment, so the
// rules are unit-tested: the user's own settings win.
//
// --topology ALGO becomes NCCL_ALGO, NCCL's own mechanism, rather than a decision to the tuner
// plugin: it holds from the first collective with no collector, secret or network round trip,
// NCCL validates and logs it ("NCCL_ALGO set by environment to ..."), and it also reaches 1-rank
// communicators, which never call a tuner. The tuner is the live path: --adaptive loads
// libnccl-bpftrain.so so bpftrain-collector --nccl-control can switch algorithms while the job
// runs (NCCL_ALGO would hide the other algorithms from it, so options.cc refuses both together).
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "trainer/app/options.h"

namespace bpftrain::trainer::app {

// NCCL's allreduce algorithms by the names the collector's tuner decisions use (PAT, NCCL's
// seventh, runs allgather and reducescatter only).
inline constexpr std::string_view kNcclAlgorithmList =
    "ring, tree, collnet_direct, collnet_chain, nvls or nvls_tree";
bool isNcclAlgorithm(std::string_view name);
// NCCL_ALGO for allreduce only ("AllReduce:Tree"; NCCL's parser takes a function prefix and
// matches names case-insensitively): a bare "Tree" would apply to every collective, and NCCL then
// fails Broadcast, AllGather and ReduceScatter, which have no tree ("no algorithm/protocol
// available ... NCCL_ALGO was set to Tree").
std::string ncclAlgoValue(std::string_view name);

struct EnvAssignment {
  std::string name, value;
  bool operator==(const EnvAssignment&) const = default;
};

struct NcclEnvironment {
  std::vector<EnvAssignment> set;  // to setenv before the communicator is created
  std::vector<std::string> kept;   // NAME=VALUE the user had set and this leaves alone
  std::string error;               // one line naming the fix; non-empty: do not start
};

struct PluginSearch {
  std::string found;                   // the first candidate that exists, or empty
  std::vector<std::string> looked_in;  // every candidate, for the error
};

NcclEnvironment ncclEnvironment(const Options& o, const std::map<std::string, std::string>& env,
                                const PluginSearch& plugin);

// Whether NCCL will load the project's profiler plugin and it will report: NCCL_PROFILER_PLUGIN
// names it ("bpftrain", or a path to libnccl-bpftrain.so or libnccl-profiler-bpftrain.so) and
// BPFTRAIN_COLLECTOR is not "off". Its per-collective bpftrain_allreduce_* carry the same job and
// rank labels as the trainer's per-step ones, so then the trainer leaves those series to it
// (mixed, the counters would count each allreduce twice and the quantiles mean neither).
bool bpftrainProfilerReports(const std::map<std::string, std::string>& env);

// The first of `candidates` that is a file.
PluginSearch findNcclPlugin(const std::vector<std::string>& candidates);
// libnccl-bpftrain.so in the build tree bpftrain-train came from, then where it is installed.
PluginSearch findNcclPlugin();

}  // namespace bpftrain::trainer::app
