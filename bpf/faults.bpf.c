// Page faults and THP faults. A process target's page faults are not counted here: user space
// reads them from /proc/PID/stat each step (collector/loader/probes/faults.cc), which costs the
// fault path nothing; on_page_fault_user is loaded only for --cgroup and --all, whose slots have
// no process list, and counts only tasks that are no tgid target. Kernels up to at least 6.18
// have no tracepoint for a huge-page fault (huge_memory:* covers khugepaged only), so a THP fault
// is counted where its folio is allocated: kmem:mm_page_alloc of PMD order in the target's own
// context (khugepaged collapses run in a kernel thread and are not counted).
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/faults.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

// log2(PMD size / page size), from /sys/kernel/mm/transparent_hugepage/hpage_pmd_size.
const volatile __u32 thp_order = 9;

BPFTRAIN_COUNTS_MAP(struct fault_counts);

SEC("tp_btf/page_fault_user")
int BPF_PROG(on_page_fault_user, unsigned long address, struct pt_regs* regs,
             unsigned long error_code) {
  struct fault_counts* c = slotCounts(&counts, currentSlotBesideTgids());
  if (c) c->page_faults++;
  return 0;
}

#define BPFTRAIN_PF_KTHREAD 0x00200000 /* PF_KTHREAD, unchanged since 2.6 */

SEC("tp_btf/mm_page_alloc")
int BPF_PROG(on_page_alloc, struct page* page, unsigned int order, gfp_t gfp_flags,
             int migratetype) {
  if (order != thp_order)  // the cheap test first: this tracepoint fires for every allocation
    return 0;
  struct task_struct* task = bpf_get_current_task_btf();
  if (task->flags & BPFTRAIN_PF_KTHREAD) return 0;
  struct fault_counts* c = slotCounts(&counts, currentSlot());
  if (c) c->thp_faults++;
  return 0;
}
