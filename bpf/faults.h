/* User page faults and transparent-huge-page faults per target. */
#ifndef BPFTRAIN_BPF_FAULTS_H
#define BPFTRAIN_BPF_FAULTS_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

struct fault_counts {
  __u64 page_faults; /* exceptions:page_fault_user of --cgroup/--all slots only */
  __u64 thp_faults;  /* PMD-order page allocations in the target's own (user) context */
};

#endif
