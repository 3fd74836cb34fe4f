// faults: user page faults and THP faults (PMD-order page allocations in the target's context).
// The PMD order comes from sysfs; without THP in the kernel the thp_faults probe is down.
#include "bpf/faults.h"

#include "collector/loader/host_facts.h"
#include "collector/loader/probe_module.h"
#include "faults.skel.h"

namespace bpftrain::collector::loader::probes::faults {
namespace {

enum : size_t { kPageFaults, kThpFaults };

class Module final : public ProbeModule {
 public:
  std::span<const ProbeDef> probes() const override {
    static const ProbeDef kProbes[] = {
        {"page_faults", {"on_page_fault_user"}, "tp_btf exceptions:page_fault_user"},
        {"thp_faults", {"on_page_alloc"}, "tp_btf kmem:mm_page_alloc (PMD order)"},
    };
    return kProbes;
  }

  Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) const override {
    auto obj = std::make_unique<ProbeObject>();
    faults_bpf* skel = nullptr;
    BPFTRAIN_TRY(obj->openSkeleton(skel, faults_bpf__open, faults_bpf__destroy, "faults", probes(),
                                   env, notes));
    const uint32_t thp_order = thpOrder();
    skel->rodata->thp_order = thp_order ? thp_order : 255;  // 255: no allocation has that order
    if (thp_order == 0)
      notes.markDown(kThpFaults, "transparent huge pages are not configured in this kernel");
    BPFTRAIN_TRY(obj->loadSkeleton(skel, faults_bpf__load, "faults"));
    BPFTRAIN_TRY(obj->setCounters<fault_counts>(skel->maps.counts, env,
                                                {{kPageFaults, &metrics::kPageFaults, "", ""},
                                                 {kThpFaults, &metrics::kThpFaults, "", ""}}));
    return obj;
  }
};

}  // namespace

const ProbeModule& module() {
  static const Module kModule;
  return kModule;
}

}  // namespace bpftrain::collector::loader::probes::faults
