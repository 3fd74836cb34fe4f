// Empty programs on the probes' tracepoints, the same attach type (tp_btf) as the probes: the
// floor a probe's per-event cost is measured against (bpf/bench_empty.h).
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/bench_empty.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

#define BPFTRAIN_EMPTY(tracepoint) \
  SEC("tp_btf/" #tracepoint)       \
  int empty_##tracepoint(void* ctx) { return 0; }

BPFTRAIN_EMPTY(page_fault_user)
BPFTRAIN_EMPTY(mm_page_alloc)
BPFTRAIN_EMPTY(sched_migrate_task)
BPFTRAIN_EMPTY(tlb_flush)
BPFTRAIN_EMPTY(tcp_sendmsg_locked)
BPFTRAIN_EMPTY(tcp_probe)
BPFTRAIN_EMPTY(tcp_retransmit_skb)

/* Ways to find the running task's slot, priced on page_fault_user (bpftrain-probe-bench
 * --variants), each with a per-slot counter as a probe has:
 *  - slot_memo: what the probes do (target.bpf.h): bpf_get_current_pid_tgid(), the per-CPU memo,
 *    the tgid hash on a miss;
 *  - slot_task_storage: the slot in the task's local storage (BPF_MAP_TYPE_TASK_STORAGE), which
 *    user space fills per thread through a pidfd; a task without storage is no target. */
BPFTRAIN_COUNTS_MAP(__u64);

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, __u32);
} task_slots SEC(".maps");

SEC("tp_btf/page_fault_user")
int slot_memo(void* ctx) {
  __u64* c = slotCounts(&counts, currentSlot());
  if (c) (*c)++;
  return 0;
}

SEC("tp_btf/page_fault_user")
int slot_task_storage(void* ctx) {
  __u32* slot = bpf_task_storage_get(&task_slots, bpf_get_current_task_btf(), 0, 0);
  if (!slot) return 0;
  __u64* c = slotCounts(&counts, *slot);
  if (c) (*c)++;
  return 0;
}
