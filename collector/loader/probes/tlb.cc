// tlb: tlb:tlb_flush per target, one counter per enum tlb_flush_reason value, labelled with the
// running kernel's names for them (BTF). The PMU-free TLB signal; dTLB/iTLB misses are in pmu.
#include "bpf/tlb.h"

#include "collector/loader/host_facts.h"
#include "collector/loader/probe_module.h"
#include "tlb.skel.h"

namespace bpftrain::collector::loader::probes::tlb {
namespace {

class Module final : public ProbeModule {
 public:
  std::span<const ProbeDef> probes() const override {
    static const ProbeDef kProbes[] = {
        {"tlb_flush", {"on_tlb_flush"}, "tp_btf tlb:tlb_flush"},
    };
    return kProbes;
  }

  Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) const override {
    auto obj = std::make_unique<ProbeObject>();
    tlb_bpf* skel = nullptr;
    BPFTRAIN_TRY(
        obj->openSkeleton(skel, tlb_bpf__open, tlb_bpf__destroy, "tlb", probes(), env, notes));
    BPFTRAIN_TRY(obj->loadSkeleton(skel, tlb_bpf__load, "tlb"));
    BPFTRAIN_TRY(obj->setCounters<tlb_flush_counts>(
        skel->maps.counts, env,
        enumCounters(0, metrics::kTlbFlushes, "reason",
                     kernelEnumNames("tlb_flush_reason", "TLB_", TLB_FLUSH_REASONS),
                     TLB_FLUSH_REASONS)));
    return obj;
  }
};

}  // namespace

const ProbeModule& module() {
  static const Module kModule;
  return kModule;
}

}  // namespace bpftrain::collector::loader::probes::tlb
