/* Which slot an event belongs to. The two maps are created once by the loader and shared by all
 * objects (bpf_map__reuse_fd), so targets are written once per change, not once per object. */
#ifndef BPFTRAIN_BPF_LIB_TARGET_BPF_H
#define BPFTRAIN_BPF_LIB_TARGET_BPF_H

#include "bpf/lib/targets.h"

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, BPFTRAIN_MAX_TARGET_PIDS);
  __type(key, __u32);   /* tgid */
  __type(value, __u32); /* slot */
} target_tgids SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, BPFTRAIN_MAX_TARGET_CGROUPS);
  __type(key, __u64);   /* cgroup v2 id (inode of the cgroup directory) */
  __type(value, __u32); /* slot */
} target_cgroups SEC(".maps");

/* Set by the loader before load: --all, and whether any --cgroup was given (skips a lookup). */
const volatile bool target_all = false;
const volatile bool target_by_cgroup = false;

/* Bumped by the loader after every change of the target maps: invalidates the caches below. */
volatile __u32 targets_generation SEC(".data.targets") = 1;

/* Per-CPU memo of the last tgid looked up: consecutive events on a CPU mostly come from the same
 * process, and an array slot is far cheaper than a hash lookup. One u64, written with one store so
 * a program nested in an interrupt can never leave a torn entry:
 * [generation:32][slot+1:9][tgid:23]. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} target_cache SEC(".maps");

/* count_tgids false: a tgid target is no slot here (-1), for programs whose tgid targets user
 * space counts another way (faults: /proc/PID/stat). */
static __always_inline int lookupSlot(__u32 tgid, __u64 cgroup_id, bool count_tgids) {
  __u32* slot = bpf_map_lookup_elem(&target_tgids, &tgid);
  if (slot) return count_tgids ? (int)*slot : -1;
  if (target_by_cgroup) {
    slot = bpf_map_lookup_elem(&target_cgroups, &cgroup_id);
    if (slot) return *slot;
  }
  return target_all ? BPFTRAIN_SLOT_ALL : -1;
}

static __always_inline int slotOfIds(__u32 tgid, __u64 cgroup_id) {
  if (tgid == 0) /* idle and interrupt context */
    return -1;
  /* A cgroup can gain a process without a generation bump; tgids above 2^23 are not cached. */
  if (target_by_cgroup || tgid >= (1u << 23)) return lookupSlot(tgid, cgroup_id, true);
  __u32 zero = 0;
  __u64* memo = bpf_map_lookup_elem(&target_cache, &zero);
  const __u64 generation = targets_generation;
  if (memo) {
    const __u64 entry = *memo;
    if ((entry & 0x7fffff) == tgid && (entry >> 32) == generation)
      return (int)((entry >> 23) & 0x1ff) - 1;
  }
  int found = lookupSlot(tgid, cgroup_id, true);
  if (memo) *memo = (generation << 32) | ((__u64)(found + 1) << 23) | tgid;
  return found;
}

/* The slot of the task running this program. */
static __always_inline int currentSlot(void) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  return slotOfIds(tgid, target_by_cgroup ? bpf_get_current_cgroup_id() : 0);
}

/* The slot of the running task unless it is a tgid target: a --cgroup's slot, --all's or -1. Not
 * memoized: the object's other programs share its memo, which holds tgid targets' slots. */
static __always_inline int currentSlotBesideTgids(void) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  if (tgid == 0) /* idle and interrupt context */
    return -1;
  return lookupSlot(tgid, target_by_cgroup ? bpf_get_current_cgroup_id() : 0, false);
}

/* The slot of another task (BTF pointer from a tp_btf argument). */
static __always_inline int taskSlot(struct task_struct* task) {
  __u64 cgroup_id = 0;
  if (target_by_cgroup) cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
  return slotOfIds(task->tgid, cgroup_id);
}

#endif
