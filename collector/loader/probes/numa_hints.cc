// numa_hints: NUMA hinting faults, a probe with no BPF object. Mainline kernels (6.18 included)
// have no tracepoint for a NUMA hinting fault, and the kprobe/fentry that could count one are
// unavailable on the machines we run: the probe is listed and always down with where to look.
#include "collector/loader/probe_module.h"

namespace bpftrain::collector::loader::probes::numa_hints {
namespace {

const ProbeDef kProbes[] = {
    {"numa_hint_faults", {}, "NUMA hinting-fault tracepoint (none in mainline)"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv&, LoadNotes&) {
  return Status::error(
      "no NUMA hinting-fault tracepoint in this kernel and kprobes/fentry are unavailable; "
      "NUMA-misplaced pages are counted in " +
      metrics::promName(metrics::kPageMigrations) + "{reason=\"numa_misplaced\"}");
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::numa_hints
