// Pages the kernel migrated in a target's context, by reason (NUMA misplacement, compaction,
// mbind/move_pages, ...). The reason is stored by value; the loader names it from BTF.
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/page_migrations.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

BPFTRAIN_COUNTS_MAP(struct page_migration_counts);

SEC("tracepoint/migrate/mm_migrate_pages")
int on_migrate_pages(struct trace_event_raw_mm_migrate_pages* ctx) {
  struct page_migration_counts* c = slotCounts(&counts, currentSlot());
  if (!c) return 0;
  __u32 reason = BPF_CORE_READ(ctx, reason);
  if (reason < PAGE_MIGRATION_REASONS) c->pages[reason] += BPF_CORE_READ(ctx, succeeded);
  return 0;
}
