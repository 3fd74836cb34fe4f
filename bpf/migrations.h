/* sched:sched_migrate_task per target, classified by how far the task moved. */
#ifndef BPFTRAIN_BPF_MIGRATIONS_H
#define BPFTRAIN_BPF_MIGRATIONS_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

enum migration_scope {
  MIGRATION_CPU = 0,
  MIGRATION_LLC = 1,
  MIGRATION_NODE = 2,
  MIGRATION_SCOPES = 3
};

struct migration_counts {
  __u64 scope[MIGRATION_SCOPES]; /* exclusive: same LLC / other LLC same node / other node */
};

#endif
