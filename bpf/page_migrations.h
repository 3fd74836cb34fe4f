/* Pages migrated (migrate:mm_migrate_pages), by enum migrate_reason value. */
#ifndef BPFTRAIN_BPF_PAGE_MIGRATIONS_H
#define BPFTRAIN_BPF_PAGE_MIGRATIONS_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

#define PAGE_MIGRATION_REASONS 16

struct page_migration_counts {
  __u64 pages[PAGE_MIGRATION_REASONS]; /* index: enum migrate_reason; names come from BTF */
};

#endif
