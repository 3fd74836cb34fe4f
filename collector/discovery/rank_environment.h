// Who a process is in a training job, read from the environment its launcher gave it
// (/proc/PID/environ): torchrun / torch.distributed.run, Open MPI's mpirun, PMIx launchers and
// Slurm's srun each set a rank and a job id there. Parsing is pure (bytes in, identity out) so
// fixture files test it; readEnviron() is the only I/O.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bpftrain::collector::discovery {

struct RankIdentity {
  std::string launcher;  // "torchrun", "torch" (env:// without an agent), "mpirun", "pmix", "slurm"
  std::string job;       // the job's id as its scheduler or launcher names it: the `job` label
  uint32_t rank = 0;     // the rank in the job's world: the `rank` label
  int32_t local_rank = -1;  // on this host; -1 when the launcher does not say
  uint32_t world = 0;       // ranks in the job; 0 when the launcher does not say
};

// The longest job label kept; longer ids (a user's free-form run id) are cut here.
inline constexpr size_t kMaxJobLabel = 64;

// The identity in an environment block (NUL-separated KEY=VALUE entries, as /proc/PID/environ
// holds them); nullopt when the process is no training rank (a launcher agent, mpirun, a shell).
// Which variables win when several launchers nest (torchrun under srun, mpirun under Slurm):
//  - rank: RANK (with WORLD_SIZE) > OMPI_COMM_WORLD_RANK > PMIX_RANK > SLURM_PROCID of an srun
//    step: the innermost launcher's numbering is the one the training code uses;
//  - job: SLURM_JOB_ID (".STEP" for an srun step) > TORCHELASTIC_RUN_ID (unless torchrun's
//    default "none") > Open MPI's job id (OMPI_MCA_ess_base_jobid, else the HNP URI's job
//    family) > PMIX_NAMESPACE > MASTER_ADDR:MASTER_PORT (the rendezvous a torch world shares):
//    the outermost scheduler's id is the one users look up.
std::optional<RankIdentity> identifyRank(std::string_view environ_block);

// Reads /proc/PID/environ (root: `proc_root`) into `out`, at most `limit` bytes (environments
// are a few KiB; the limit bounds a pathological one). False when the process is gone or its
// environment unreadable (another user's process without CAP_SYS_PTRACE, a kernel thread).
bool readEnviron(const std::string& proc_root, pid_t pid, std::string& out,
                 size_t limit = 256 * 1024);

}  // namespace bpftrain::collector::discovery
