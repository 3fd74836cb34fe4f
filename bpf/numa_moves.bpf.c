// NUMA balancing's task placement: a move to the preferred node, a swap with a task there, or a
// failed attempt that leaves the task stuck. Rare events, so classic tracepoints (stable records).
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/numa_moves.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

BPFTRAIN_COUNTS_MAP(struct numa_move_counts);

static __always_inline void countKind(__u32 tgid, int kind) {
  struct numa_move_counts* c = slotCounts(&counts, slotOfIds(tgid, bpf_get_current_cgroup_id()));
  if (c && kind >= 0 && kind < NUMA_MOVE_KINDS) c->kind[kind]++;
}

SEC("tracepoint/sched/sched_move_numa")
int on_move_numa(struct trace_event_raw_sched_move_numa* ctx) {
  countKind(BPF_CORE_READ(ctx, tgid), NUMA_MOVE);
  return 0;
}

SEC("tracepoint/sched/sched_swap_numa")
int on_swap_numa(struct trace_event_raw_sched_numa_pair_template* ctx) {
  countKind(BPF_CORE_READ(ctx, src_tgid), NUMA_SWAP);
  countKind(BPF_CORE_READ(ctx, dst_tgid), NUMA_SWAP);
  return 0;
}

SEC("tracepoint/sched/sched_stick_numa")
int on_stick_numa(struct trace_event_raw_sched_numa_pair_template* ctx) {
  countKind(BPF_CORE_READ(ctx, src_tgid), NUMA_STICK);
  return 0;
}
