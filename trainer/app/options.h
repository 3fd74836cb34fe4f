// bpftrain-train's command line, and the rank/world/store taken from the launchers users already
// have (mpirun, srun, torchrun) when no --rank is given.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/training_config.h"
#include "trainer/model/mlp.h"

namespace bpftrain::trainer::app {

// Default: measured no slower than one bucket in clear phases (docs/trainer.md); at most 8: the
// algorithms cache one Gloo object per bucket in caches of 8 (more would rebuild them every step).
inline constexpr int kDefaultAllreduceBuckets = 4;
inline constexpr int kMaxAllreduceBuckets = 8;

struct Options {
  // Who and where.
  int ranks = 0;  // > 0: launcher mode, start this many local ranks
  int rank = -1;
  int world = -1;
  int local_rank = -1;
  int local_world = -1;
  bool local_defaulted = false;       // no launcher said: derived from hostnames at start
  std::string rank_source = "flags";  // flags | launcher | mpirun | srun | torchrun | single
  std::string store;                  // DIR or HOST:PORT
  std::string backend = "gloo";
  std::string bind;                       // transport bind address
  std::string transport = "tcp";          // tcp | ibverbs (Gloo's RDMA transport)
  std::vector<std::string> rdma_devices;  // ibverbs: one for every rank, or one per rank
  int gid_index = 0;                      // ibverbs: GID table index
  std::vector<int> node_of;
  std::vector<std::string> netns;  // launcher: namespace of rank i
  int restarts = 0;                // launcher: restart the job this often after a rank fails
  std::string job = "default";
  int timeout_s = 30;  // rendezvous, dead peers, launcher's stop timeout

  // What to train.
  model::ModelSpec model;
  std::string data;  // empty: model::defaultDigitsPath()
  uint64_t steps = 800;
  // > 0: stop after about this many seconds of training, at the same step on every rank (rank 0
  // decides and tells the others in the gradient tail); --steps stays an upper bound.
  float duration_s = 0;
  int batch = 32;  // per rank
  float lr = 0.05f;
  float momentum = 0.9f;
  uint64_t seed = 1;
  bool hugepages = true;
  int eval_every = 200;

  // How.
  Topology topology = Topology::kRing;  // --backend gloo
  // --backend nccl --topology: NCCL's algorithm, as nccl_environment.h names it (ring, tree, ...);
  // empty: NCCL's own choice.
  std::string nccl_algo;
  PinMode pin = PinMode::kNone;
  bool adaptive = false;
  // With --adaptive or --switch-every on Gloo: every topology runs each gradient bucket once
  // before step 0 (RankRunner::warmTopologies). Off: a switch's first steps pay the set-up, and
  // the resident set grows only for topologies the run actually uses.
  bool warm_topologies = true;
  std::string control = "127.0.0.1:9472";
  std::string secret_file;
  std::string collector = "127.0.0.1:9470";  // "none": no telemetry
  int metrics_hz = 10;

  // Checkpoints.
  std::string checkpoint_dir;
  bool resume = false;
  int checkpoint_every = 0;  // 0 with --checkpoint: 100

  // Test and benchmark hooks: deterministic topology/pinning switches drawn on rank 0 every K
  // steps (through the same broadcast/apply path as controller decisions), and blocks of K steps
  // alternating telemetry+adaptive sync on and off to measure their overhead in one run.
  int switch_every = 0;
  uint64_t switch_seed = 0;
  int overhead_ab = 0;
  std::string sync = "auto";  // how config words travel: auto | tail | broadcast
  // The gradient allreduce as this many buckets (collective/gradient_buckets.h), so a topology
  // decision applies between buckets instead of at the next step; --backend gloo.
  int allreduce_buckets = kDefaultAllreduceBuckets;
  bool quiet = false;
};

// Parses argv (without argv[0]) and the launcher environment `env`. On a usage error returns
// nullopt with `error` set to one line naming the fix (the caller prints it and exits 2).
std::optional<Options> parseOptions(const std::vector<std::string>& args,
                                    const std::map<std::string, std::string>& env,
                                    std::string& error);

std::map<std::string, std::string> environmentMap();
std::string usage();

}  // namespace bpftrain::trainer::app
