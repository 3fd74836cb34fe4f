// faults: user page faults and THP faults (PMD-order page allocations in the target's context).
// The PMD order comes from sysfs; without THP in the kernel the thp_faults probe is down.
#include "bpf/faults.h"

#include "collector/loader/host_facts.h"
#include "collector/loader/probe_module.h"
#include "faults.skel.h"

namespace bpftrain::collector::loader::probes::faults {
namespace {

enum : size_t { kPageFaults, kThpFaults };

const ProbeDef kProbes[] = {
    {"page_faults", {"on_page_fault_user"}, "tp_btf exceptions:page_fault_user"},
    {"thp_faults", {"on_page_alloc"}, "tp_btf kmem:mm_page_alloc (PMD order)"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  auto rodata = [&](faults_bpf* skel) {
    const uint32_t thp_order = thpOrder();
    skel->rodata->thp_order = thp_order ? thp_order : 255;  // 255: no allocation has that order
    if (thp_order == 0)
      notes.markDown(kThpFaults, "transparent huge pages are not configured in this kernel");
  };
  return loadObject<fault_counts>(
      BPFTRAIN_SKELETON(faults), kProbes, env, notes,
      {{kPageFaults, &metrics::kPageFaults, "", ""}, {kThpFaults, &metrics::kThpFaults, "", ""}},
      rodata);
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::faults
