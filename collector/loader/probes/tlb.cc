// tlb: tlb:tlb_flush per target, one counter per enum tlb_flush_reason value, labelled with the
// running kernel's names for them (BTF). The PMU-free TLB signal; dTLB/iTLB misses are in pmu.
#include "bpf/tlb.h"

#include "collector/loader/probe_module.h"
#include "tlb.skel.h"

namespace bpftrain::collector::loader::probes::tlb {
namespace {

const ProbeDef kProbes[] = {
    {"tlb_flush", {"on_tlb_flush"}, "tp_btf tlb:tlb_flush"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  return loadObject<tlb_flush_counts>(BPFTRAIN_SKELETON(tlb), kProbes, env, notes,
                                      enumCounters(0, metrics::kTlbFlushes, "reason",
                                                   "tlb_flush_reason", "TLB_", TLB_FLUSH_REASONS));
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::tlb
