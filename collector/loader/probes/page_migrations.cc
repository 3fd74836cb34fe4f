// page_migrations: migrate:mm_migrate_pages per target, one counter per enum migrate_reason value,
// labelled with the running kernel's names for them (BTF).
#include "bpf/page_migrations.h"

#include "collector/loader/probe_module.h"
#include "page_migrations.skel.h"

namespace bpftrain::collector::loader::probes::page_migrations {
namespace {

const ProbeDef kProbes[] = {
    {"page_migrations", {"on_migrate_pages"}, "tracepoint migrate:mm_migrate_pages"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  return loadObject<page_migration_counts>(
      BPFTRAIN_SKELETON(page_migrations), kProbes, env, notes,
      enumCounters(0, metrics::kPageMigrations, "reason", "migrate_reason", "MR_",
                   PAGE_MIGRATION_REASONS));
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::page_migrations
