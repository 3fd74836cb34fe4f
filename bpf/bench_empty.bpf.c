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

/* Ways to find a task's slot, priced (bpftrain-probe-bench --variants), each with a per-slot
 * counter as a probe has, on page_fault_user (the running task) and sched_migrate_task (the task
 * argument):
 *  - slot_table / migrate_table: what the probes do (target.bpf.h): the tgid through the task
 *    pointer, one byte of the tgid table;
 *  - slot_memo / migrate_memo: the design before it, kept here as the comparison: the tgid from
 *    bpf_get_current_pid_tgid() (page faults) or the task, a per-CPU memo of the last tgid looked
 *    up, a hash lookup on a miss;
 *  - slot_task_storage: the slot in the task's local storage (BPF_MAP_TYPE_TASK_STORAGE), which
 *    user space fills per thread through a pidfd; a task without storage is no target. */
BPFTRAIN_COUNTS_MAP(__u64);

struct {
  __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, __u32);
} task_slots SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 4096);
  __type(key, __u32);   /* tgid */
  __type(value, __u32); /* slot */
} memo_tgids SEC(".maps");

/* [generation:32][slot+1:9][tgid:23], one store so that a nested program never tears it. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} memo SEC(".maps");

volatile __u32 memo_generation SEC(".data.memo") = 1;

static __always_inline int memoSlot(__u32 tgid) {
  if (tgid == 0 || tgid >= (1u << 23)) return -1;
  __u32 zero = 0;
  __u64* entry = bpf_map_lookup_elem(&memo, &zero);
  const __u64 generation = memo_generation;
  if (entry && (*entry & 0x7fffff) == tgid && (*entry >> 32) == generation)
    return (int)((*entry >> 23) & 0x1ff) - 1;
  __u32* slot = bpf_map_lookup_elem(&memo_tgids, &tgid);
  int found = slot ? (int)*slot : -1;
  if (entry) *entry = (generation << 32) | ((__u64)(found + 1) << 23) | tgid;
  return found;
}

static __always_inline void countSlot(int slot) {
  __u64* c = slotCounts(&counts, slot);
  if (c) (*c)++;
}

SEC("tp_btf/page_fault_user")
int slot_table(void* ctx) {
  countSlot(currentSlot());
  return 0;
}

SEC("tp_btf/page_fault_user")
int slot_memo(void* ctx) {
  countSlot(memoSlot(bpf_get_current_pid_tgid() >> 32));
  return 0;
}

SEC("tp_btf/page_fault_user")
int slot_task_storage(void* ctx) {
  __u32* slot = bpf_task_storage_get(&task_slots, bpf_get_current_task_btf(), 0, 0);
  if (slot) countSlot(*slot);
  return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(migrate_table, struct task_struct* task) {
  countSlot(taskSlot(task));
  return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(migrate_memo, struct task_struct* task) {
  countSlot(memoSlot(task->tgid));
  return 0;
}

/* What a migration probe's cost is made of (--variants, forced migrations): reading the task's
 * tgid, finding its slot in the tgid table, incrementing one per-CPU counter, each alone; and the
 * slot and the counter in one per-CPU line (a bucket found by a hash of the tgid), the layout
 * that would touch one line where the probes touch two. On this host each map line a program
 * touches costs about as much as the others, whatever the map type (docs/probes.md). */
struct target_bucket {
  __u32 tgid;
  __u32 slot;
  __u64 count[3];
};

struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1024);
  __type(key, __u32);
  __type(value, struct target_bucket);
} buckets SEC(".maps");

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(migrate_tgid_only, struct task_struct* task) {
  __u32 tgid = task->tgid;
  barrier_var(tgid); /* the load stays */
  return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(migrate_slot_only, struct task_struct* task) {
  __u32 slot = tgidSlot(task->tgid);
  barrier_var(slot);
  return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(migrate_counter_only, struct task_struct* task) {
  countSlot(1);
  return 0;
}

SEC("tp_btf/sched_migrate_task")
int BPF_PROG(migrate_bucket, struct task_struct* task) {
  __u32 tgid = task->tgid;
  __u32 key = (tgid * 2654435761u) >> 22; /* Fibonacci hash to 10 bits */
  struct target_bucket* b = bpf_map_lookup_elem(&buckets, &key);
  if (b && b->tgid == tgid) b->count[0]++;
  return 0;
}

/* The same two layouts on tlb_flush (--variants, TLB shootdowns): the probe's (the running task's
 * tgid, the table, a per-slot counter) and a bucket holding both. */
SEC("tp_btf/tlb_flush")
int BPF_PROG(tlb_table, int reason) {
  __u64* c = slotCounts(&counts, currentSlot());
  if (c) (*c)++;
  return 0;
}

SEC("tp_btf/tlb_flush")
int BPF_PROG(tlb_bucket, int reason) {
  __u32 tgid = currentTgid();
  __u32 key = (tgid * 2654435761u) >> 22;
  struct target_bucket* b = bpf_map_lookup_elem(&buckets, &key);
  if (b && b->tgid == tgid) b->count[0]++;
  return 0;
}
