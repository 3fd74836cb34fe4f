/* NUMA hinting faults per target, by whether the faulting CPU's node held the page. */
#ifndef BPFTRAIN_BPF_NUMA_HINTS_H
#define BPFTRAIN_BPF_NUMA_HINTS_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

struct numa_hint_counts {
  __u64 local;  /* the page was on the node of the CPU that faulted (TNF_FAULT_LOCAL) */
  __u64 remote; /* it was on another node */
};

#endif
