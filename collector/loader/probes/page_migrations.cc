// page_migrations: migrate:mm_migrate_pages per target, one counter per enum migrate_reason value,
// labelled with the running kernel's names for them (BTF).
#include "bpf/page_migrations.h"

#include "collector/loader/host_facts.h"
#include "collector/loader/probe_module.h"
#include "page_migrations.skel.h"

namespace bpftrain::collector::loader::probes::page_migrations {
namespace {

class Module final : public ProbeModule {
 public:
  std::span<const ProbeDef> probes() const override {
    static const ProbeDef kProbes[] = {
        {"page_migrations", {"on_migrate_pages"}, "tracepoint migrate:mm_migrate_pages"},
    };
    return kProbes;
  }

  Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) const override {
    auto obj = std::make_unique<ProbeObject>();
    page_migrations_bpf* skel = nullptr;
    BPFTRAIN_TRY(obj->openSkeleton(skel, page_migrations_bpf__open, page_migrations_bpf__destroy,
                                   "page_migrations", probes(), env, notes));
    BPFTRAIN_TRY(obj->loadSkeleton(skel, page_migrations_bpf__load, "page_migrations"));
    BPFTRAIN_TRY(obj->setCounters<page_migration_counts>(
        skel->maps.counts, env,
        enumCounters(0, metrics::kPageMigrations, "reason",
                     kernelEnumNames("migrate_reason", "MR_", PAGE_MIGRATION_REASONS),
                     PAGE_MIGRATION_REASONS)));
    return obj;
  }
};

}  // namespace

const ProbeModule& module() {
  static const Module kModule;
  return kModule;
}

}  // namespace bpftrain::collector::loader::probes::page_migrations
