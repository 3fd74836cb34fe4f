/* Targeting contract shared by every BPF object and the loader: user space assigns each target
 * (a rank, a --pid, a --cgroup) a slot; BPF programs count per slot in per-CPU arrays. */
#ifndef BPFTRAIN_BPF_LIB_TARGETS_H
#define BPFTRAIN_BPF_LIB_TARGETS_H

/* Slot 0 collects every untargeted process when --all is given. */
#define BPFTRAIN_SLOT_ALL 0
#define BPFTRAIN_MAX_SLOTS 256
/* A rank announces its pid; the table is indexed by tgid so every thread of a target counts. It
 * covers every pid there can be: pid_max cannot exceed PID_MAX_LIMIT, 4,194,304 on 64-bit
 * (include/linux/threads.h), so the table is 4 MiB, the largest array value the kernel allows
 * (KMALLOC_MAX_SIZE). A slot is one byte, so there are at most 256. */
#define BPFTRAIN_PID_LIMIT (1u << 22)
#define BPFTRAIN_MAX_TARGET_CGROUPS 64
#define BPFTRAIN_MAX_CPUS 1024

#endif
