// Task migrations of target processes: cross-CPU (same LLC), cross-LLC or cross-node, using the
// CPU->(node, LLC) table the loader fills from sysfs before load.
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/migrations.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* Per CPU, node << 16 | LLC index (the loader numbers LLCs densely): one table, so a migration
 * reads one cache line of it for both CPUs where two tables cost two. */
const volatile __u32 cpu_domain[BPFTRAIN_MAX_CPUS] = {};

BPFTRAIN_COUNTS_MAP(struct migration_counts);

// Before 5.16 the CPU lived in task_struct itself; CO-RE picks whichever field exists.
struct task_struct___cpu_in_task {
  unsigned int cpu;
} __attribute__((preserve_access_index));

static __always_inline __u32 taskCpu(struct task_struct* task) {
  if (bpf_core_field_exists(task->thread_info.cpu))
    return task->thread_info.cpu;  // a trusted tp_btf pointer: a plain load, no probe_read
  return BPF_CORE_READ((struct task_struct___cpu_in_task*)task, cpu);
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(on_migrate_task, struct task_struct* task, int dest_cpu) {
  int slot = taskSlot(task);
  if (slot < 0) return 0;
  struct migration_counts* c = slotCounts(&counts, slot);
  if (!c) return 0;
  __u32 from = taskCpu(task);
  __u32 to = (__u32)dest_cpu;
  if (from >= BPFTRAIN_MAX_CPUS || to >= BPFTRAIN_MAX_CPUS) return 0;
  // The mask after an opaque barrier survives optimisation, so the verifier sees each index
  // bounded right where it is used (clang folds the check above into one test of from|to).
  barrier_var(from);
  barrier_var(to);
  from &= BPFTRAIN_MAX_CPUS - 1;
  to &= BPFTRAIN_MAX_CPUS - 1;
  const __u32 from_domain = cpu_domain[from], to_domain = cpu_domain[to];
  if (from_domain == to_domain)
    c->scope[MIGRATION_CPU]++;
  else if ((from_domain >> 16) == (to_domain >> 16))
    c->scope[MIGRATION_LLC]++;
  else
    c->scope[MIGRATION_NODE]++;
  return 0;
}
