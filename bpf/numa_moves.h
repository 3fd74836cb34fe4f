/* Scheduler NUMA placement decisions for target tasks (sched_{move,swap,stick}_numa). */
#ifndef BPFTRAIN_BPF_NUMA_MOVES_H
#define BPFTRAIN_BPF_NUMA_MOVES_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

enum numa_move_kind { NUMA_MOVE = 0, NUMA_SWAP = 1, NUMA_STICK = 2, NUMA_MOVE_KINDS = 3 };

struct numa_move_counts {
  __u64 kind[NUMA_MOVE_KINDS];
};

#endif
