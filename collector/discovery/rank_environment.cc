#include "collector/discovery/rank_environment.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <charconv>

namespace bpftrain::collector::discovery {
namespace {

// The variables read, by index; everything else in the block is skipped.
enum Var : size_t {
  kRank,
  kWorldSize,
  kLocalRank,
  kElasticRunId,
  kMasterAddr,
  kMasterPort,
  kOmpiRank,
  kOmpiSize,
  kOmpiLocalRank,
  kOmpiJobId,
  kOmpiHnpUri,
  kPmixRank,
  kPmixNamespace,
  kSlurmJobId,
  kSlurmStepId,
  kSlurmProcId,
  kSlurmLocalId,
  kSlurmNtasks,
  kVarCount
};

constexpr std::array<std::string_view, kVarCount> kNames = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "TORCHELASTIC_RUN_ID",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_MCA_ess_base_jobid",
    "OMPI_MCA_orte_hnp_uri",
    "PMIX_RANK",
    "PMIX_NAMESPACE",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NTASKS",
};

// Ranks above this are not a launcher's (a typo, a foreign meaning of RANK).
constexpr uint32_t kMaxRank = 1u << 24;
// Slurm's pseudo steps (batch script, extern, interactive) are 0xfffffff0 and up: their
// processes are the batch shell and the launchers, not tasks of a job step.
constexpr uint64_t kFirstSlurmPseudoStep = 0xfffffff0u;

struct Vars {
  std::array<std::string_view, kVarCount> value{};
  std::array<bool, kVarCount> set{};
  bool has(Var v) const { return v < kVarCount && set[v]; }  // kVarCount: none
  std::string_view operator[](Var v) const { return value[v]; }
};

Vars scan(std::string_view block) {
  Vars vars;
  while (!block.empty()) {
    const size_t end = block.find('\0');
    const std::string_view entry = block.substr(0, end);
    block = end == std::string_view::npos ? std::string_view() : block.substr(end + 1);
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    const std::string_view key = entry.substr(0, eq);
    for (size_t i = 0; i < kVarCount; ++i)
      if (key == kNames[i]) {
        // The first definition wins, as getenv() has it.
        if (!vars.set[i]) vars.value[i] = entry.substr(eq + 1);
        vars.set[i] = true;
        break;
      }
  }
  return vars;
}

template <typename T>
bool number(std::string_view s, T& out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

// A label value a person can read and Prometheus keeps: printable ASCII, at most kMaxJobLabel.
std::string label(std::string_view id) {
  std::string out(id.substr(0, kMaxJobLabel));
  for (char& c : out)
    if (c < 0x21 || c > 0x7e || c == '"' || c == '\\') c = '_';
  return out;
}

bool slurmStep(const Vars& v, uint64_t& step) {
  return v.has(kSlurmStepId) && number(v[kSlurmStepId], step) && step < kFirstSlurmPseudoStep;
}

std::string jobOf(const Vars& v) {
  uint64_t job_id = 0, step = 0;
  if (v.has(kSlurmJobId) && number(v[kSlurmJobId], job_id)) {
    std::string job(v[kSlurmJobId]);
    if (slurmStep(v, step)) job += "." + std::string(v[kSlurmStepId]);
    return label(job);
  }
  if (v.has(kElasticRunId) && !v[kElasticRunId].empty() && v[kElasticRunId] != "none")
    return label(v[kElasticRunId]);
  if (v.has(kOmpiJobId) && !v[kOmpiJobId].empty()) return label(v[kOmpiJobId]);
  // "JOBFAMILY.VPID;tcp://..." (Open MPI 4): the family names one mpirun's jobs.
  if (v.has(kOmpiHnpUri)) {
    const std::string_view family = v[kOmpiHnpUri].substr(0, v[kOmpiHnpUri].find_first_of(".;"));
    if (!family.empty()) return label(family);
  }
  if (v.has(kPmixNamespace) && !v[kPmixNamespace].empty()) return label(v[kPmixNamespace]);
  if (v.has(kMasterAddr) && v.has(kMasterPort) && !v[kMasterAddr].empty())
    return label(std::string(v[kMasterAddr]) + ":" + std::string(v[kMasterPort]));
  return {};
}

}  // namespace

std::optional<RankIdentity> identifyRank(std::string_view environ_block) {
  const Vars v = scan(environ_block);
  RankIdentity id;
  uint32_t rank = 0, world = 0;
  int32_t local = -1;
  uint64_t step = 0;
  auto take = [&](Var r, Var w, Var l) {
    rank = 0;
    world = 0;
    local = -1;
    if (!number(v[r], rank)) return false;
    if (v.has(w) && !number(v[w], world)) return false;
    if (v.has(l) && !number(v[l], local)) local = -1;
    return rank < kMaxRank && (world == 0 || rank < world);
  };
  // torch.distributed's env:// contract is RANK and WORLD_SIZE together; RANK alone is too
  // common a name to trust.
  if (v.has(kRank) && v.has(kWorldSize) && take(kRank, kWorldSize, kLocalRank))
    id.launcher = v.has(kElasticRunId) ? "torchrun" : "torch";
  else if (v.has(kOmpiRank) && take(kOmpiRank, kOmpiSize, kOmpiLocalRank))
    id.launcher = "mpirun";
  else if (v.has(kPmixRank) && v.has(kPmixNamespace) && take(kPmixRank, kVarCount, kVarCount))
    id.launcher = "pmix";
  else if (v.has(kSlurmProcId) && slurmStep(v, step) &&
           take(kSlurmProcId, kSlurmNtasks, kSlurmLocalId))
    id.launcher = "slurm";
  else
    return std::nullopt;
  id.job = jobOf(v);
  if (id.job.empty()) return std::nullopt;
  id.rank = rank;
  id.world = world;
  id.local_rank = local;
  return id;
}

bool readEnviron(const std::string& proc_root, pid_t pid, std::string& out, size_t limit) {
  out.clear();
  const std::string path = proc_root + "/" + std::to_string(pid) + "/environ";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[16384];
  bool ok = true;
  while (out.size() < limit) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      ok = false;
      break;
    }
    if (n == 0) break;
    out.append(buf, size_t(std::min<size_t>(size_t(n), limit - out.size())));
  }
  ::close(fd);
  return ok;
}

}  // namespace bpftrain::collector::discovery
