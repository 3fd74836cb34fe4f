// migrations: sched:sched_migrate_task per target, classified cpu / llc / node with the CPU->LLC
// and CPU->node tables from sysfs, written into the object's rodata before load.
#include "bpf/migrations.h"

#include "collector/loader/host_facts.h"
#include "collector/loader/probe_module.h"
#include "migrations.skel.h"

namespace bpftrain::collector::loader::probes::migrations {
namespace {

class Module final : public ProbeModule {
 public:
  std::span<const ProbeDef> probes() const override {
    static const ProbeDef kProbes[] = {
        {"migrations", {"on_migrate_task"}, "tp_btf sched:sched_migrate_task"},
    };
    return kProbes;
  }

  Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) const override {
    auto obj = std::make_unique<ProbeObject>();
    migrations_bpf* skel = nullptr;
    BPFTRAIN_TRY(obj->openSkeleton(skel, migrations_bpf__open, migrations_bpf__destroy,
                                   "migrations", probes(), env, notes));
    const CpuTopology topo = readCpuTopology(env.ncpus);
    for (size_t c = 0; c < topo.llc.size() && c < BPFTRAIN_MAX_CPUS; ++c) {
      skel->rodata->cpu_llc[c] = topo.llc[c];
      skel->rodata->cpu_node[c] = topo.node[c];
    }
    BPFTRAIN_TRY(obj->loadSkeleton(skel, migrations_bpf__load, "migrations"));
    // migration_counts.scope[MIGRATION_CPU], [MIGRATION_LLC], [MIGRATION_NODE]
    std::vector<CounterDef> counters;
    for (const char* scope : {"cpu", "llc", "node"})
      counters.push_back({0, &metrics::kMigrations, "scope", scope});
    BPFTRAIN_TRY(obj->setCounters<migration_counts>(skel->maps.counts, env, std::move(counters)));
    return obj;
  }
};

}  // namespace

const ProbeModule& module() {
  static const Module kModule;
  return kModule;
}

}  // namespace bpftrain::collector::loader::probes::migrations
