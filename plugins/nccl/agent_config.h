// The plugin's settings, all from the environment of the NCCL process (NCCL offers plugins no
// other channel): where the collector is, which job and rank this process is, the HMAC secret
// for tuner decisions and which profiler events to ask NCCL for.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bpftrain::nccl_plugin {

struct AgentConfig {
  std::string collector = "127.0.0.1:9470";  // BPFTRAIN_COLLECTOR; "off": send nothing
  std::string job = "nccl";                  // BPFTRAIN_JOB
  std::string node;                          // hostname, made a valid name
  int64_t rank = -1;  // RANK, OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMI_RANK; -1: the first comm's
  int64_t world = 0;  // WORLD_SIZE, OMPI_COMM_WORLD_SIZE, SLURM_NTASKS, PMI_SIZE
  std::string secret_file;            // BPFTRAIN_SECRET_FILE; empty: decisions refused (no_secret)
  uint64_t flush_ns = 200'000'000;    // BPFTRAIN_NCCL_FLUSH_MS
  int event_mask = 0;                 // BPFTRAIN_NCCL_EVENTS=coll,kernel,proxy (default: all)
  std::vector<std::string> warnings;  // settings that were invalid and what was used instead

  static AgentConfig fromEnvironment();
};

}  // namespace bpftrain::nccl_plugin
