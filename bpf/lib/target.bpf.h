/* Which slot an event belongs to. The two maps are created once by the loader and shared by all
 * objects (bpf_map__reuse_fd), so targets are written once per change, not once per object. */
#ifndef BPFTRAIN_BPF_LIB_TARGET_BPF_H
#define BPFTRAIN_BPF_LIB_TARGET_BPF_H

#include "bpf/lib/targets.h"

/* tgid -> slot, one byte per possible pid, 0 for a process that is no tgid target (slot 0 is
 * --all's and never a process's). An array, not a hash: the verifier inlines the lookup of an
 * array map into a bounds check and an address, so finding a slot is one byte load on every event,
 * target or not, with no per-CPU memo to keep valid. The loader writes it through mmap(). */
struct tgid_slot_table {
  __u8 slot[BPFTRAIN_PID_LIMIT];
};

struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __uint(map_flags, BPF_F_MMAPABLE);
  __type(key, __u32);
  __type(value, struct tgid_slot_table);
} target_tgid_slots SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, BPFTRAIN_MAX_TARGET_CGROUPS);
  __type(key, __u64);   /* cgroup v2 id (inode of the cgroup directory) */
  __type(value, __u32); /* slot */
} target_cgroups SEC(".maps");

/* Set by the loader before load: --all, and whether any --cgroup was given (skips a lookup). */
const volatile bool target_all = false;
const volatile bool target_by_cgroup = false;

/* The slot of a tgid target, or 0. */
static __always_inline __u32 tgidSlot(__u32 tgid) {
  __u32 zero = 0;
  struct tgid_slot_table* table = bpf_map_lookup_elem(&target_tgid_slots, &zero);
  if (!table || tgid >= BPFTRAIN_PID_LIMIT) return 0;
  barrier_var(tgid); /* keep the bound on the index the verifier sees */
  tgid &= BPFTRAIN_PID_LIMIT - 1;
  return table->slot[tgid];
}

/* A --cgroup's slot, --all's or -1. */
static __always_inline int untargetedSlot(__u64 cgroup_id) {
  if (target_by_cgroup) {
    __u32* slot = bpf_map_lookup_elem(&target_cgroups, &cgroup_id);
    if (slot) return *slot;
  }
  return target_all ? BPFTRAIN_SLOT_ALL : -1;
}

static __always_inline int slotOfIds(__u32 tgid, __u64 cgroup_id) {
  if (tgid == 0) /* idle and interrupt context */
    return -1;
  __u32 slot = tgidSlot(tgid);
  return slot ? (int)slot : untargetedSlot(cgroup_id);
}

/* The running task's tgid through the task pointer: bpf_get_current_task_btf() is a per-CPU load
 * where the JIT inlines it, bpf_get_current_pid_tgid() always a helper call. */
static __always_inline __u32 currentTgid(void) { return bpf_get_current_task_btf()->tgid; }

/* The slot of the task running this program. */
static __always_inline int currentSlot(void) {
  return slotOfIds(currentTgid(), target_by_cgroup ? bpf_get_current_cgroup_id() : 0);
}

/* The slot of the running task unless it is a tgid target: a --cgroup's slot, --all's or -1. */
static __always_inline int currentSlotBesideTgids(void) {
  __u32 tgid = currentTgid();
  if (tgid == 0 || tgidSlot(tgid)) return -1;
  return untargetedSlot(target_by_cgroup ? bpf_get_current_cgroup_id() : 0);
}

/* The slot of another task (BTF pointer from a tp_btf argument). */
static __always_inline int taskSlot(struct task_struct* task) {
  __u64 cgroup_id = 0;
  if (target_by_cgroup) cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
  return slotOfIds(task->tgid, cgroup_id);
}

#endif
