// NUMA hinting faults. No kernel up to 6.18 has a tracepoint for one; task_numa_fault() is where
// the scheduler accounts each hinting fault (do_numa_page, do_huge_pmd_numa_page) to the faulting
// task, which is current, with TNF_FAULT_LOCAL set when the page was on the faulting CPU's node
// before any migration. A kprobe, not fentry: kprobes exist on more kernels (fentry needs BTF
// trampolines, which older and non-x86 kernels lack), and the loader marks the probe down where
// neither exists (6.18 here has no kprobes). One count per fault, as /proc/vmstat's
// numa_hint_faults and numa_hint_faults_local count them (a THP fault is one fault of 512 pages).
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/numa_hints.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

BPFTRAIN_COUNTS_MAP(struct numa_hint_counts);

// include/linux/sched/numa_balancing.h: a #define, so not in BTF; unchanged since 3.13.
#define BPFTRAIN_TNF_FAULT_LOCAL 0x08

SEC("kprobe/task_numa_fault")
int BPF_KPROBE(on_task_numa_fault, int last_cpupid, int mem_node, int pages, int flags) {
  struct numa_hint_counts* c = slotCounts(&counts, currentSlot());
  if (!c) return 0;
  if (flags & BPFTRAIN_TNF_FAULT_LOCAL)
    c->local++;
  else
    c->remote++;
  return 0;
}
