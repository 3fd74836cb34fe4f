/* Targeting contract shared by every BPF object and the loader: user space assigns each target
 * (a rank, a --pid, a --cgroup) a slot; BPF programs count per slot in per-CPU arrays. */
#ifndef BPFTRAIN_BPF_LIB_TARGETS_H
#define BPFTRAIN_BPF_LIB_TARGETS_H

/* Slot 0 collects every untargeted process when --all is given. */
#define BPFTRAIN_SLOT_ALL 0
#define BPFTRAIN_MAX_SLOTS 256
/* A rank announces its pid; the map is keyed by tgid so every thread of a target counts. */
#define BPFTRAIN_MAX_TARGET_PIDS 4096
#define BPFTRAIN_MAX_TARGET_CGROUPS 64
#define BPFTRAIN_MAX_CPUS 1024

#endif
