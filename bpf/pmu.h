/* Hardware PMU counters (perf_event programs), per target. Only where a PMU exists. */
#ifndef BPFTRAIN_BPF_PMU_H
#define BPFTRAIN_BPF_PMU_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

enum pmu_event {
  PMU_DTLB_MISSES = 0,
  PMU_ITLB_MISSES = 1,
  PMU_NODE_LOAD_MISSES = 2,
  PMU_NODE_LOADS = 3,
  PMU_EVENTS = 4
};

struct pmu_counts {
  __u64 events[PMU_EVENTS]; /* sum of sample periods: events counted while a target ran */
};

#endif
