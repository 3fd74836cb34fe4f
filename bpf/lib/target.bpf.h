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

static __always_inline int slotOfIds(__u32 tgid, __u64 cgroup_id) {
  __u32 *slot;
  if (tgid == 0) /* idle and interrupt context */
    return -1;
  slot = bpf_map_lookup_elem(&target_tgids, &tgid);
  if (slot)
    return *slot;
  if (target_by_cgroup) {
    slot = bpf_map_lookup_elem(&target_cgroups, &cgroup_id);
    if (slot)
      return *slot;
  }
  return target_all ? BPFTRAIN_SLOT_ALL : -1;
}

/* The slot of the task running this program. */
static __always_inline int currentSlot(void) {
  __u32 tgid = bpf_get_current_pid_tgid() >> 32;
  return slotOfIds(tgid, target_by_cgroup ? bpf_get_current_cgroup_id() : 0);
}

/* The slot of another task (BTF pointer from a tp_btf argument). */
static __always_inline int taskSlot(struct task_struct *task) {
  __u64 cgroup_id = 0;
  if (target_by_cgroup)
    cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
  return slotOfIds(task->tgid, cgroup_id);
}

#endif
