// migrations: sched:sched_migrate_task per target, classified cpu / llc / node with the CPU->LLC
// and CPU->node tables from sysfs, written into the object's rodata before load.
#include "bpf/migrations.h"

#include "collector/loader/host_facts.h"
#include "collector/loader/probe_module.h"
#include "migrations.skel.h"

namespace bpftrain::collector::loader::probes::migrations {
namespace {

const ProbeDef kProbes[] = {
    {"migrations", {"on_migrate_task"}, "tp_btf sched:sched_migrate_task"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  auto rodata = [&](migrations_bpf* skel) {
    const CpuTopology topo = readCpuTopology(env.ncpus);
    for (size_t c = 0; c < topo.llc.size() && c < BPFTRAIN_MAX_CPUS; ++c) {
      skel->rodata->cpu_llc[c] = topo.llc[c];
      skel->rodata->cpu_node[c] = topo.node[c];
    }
  };
  // migration_counts.scope[MIGRATION_CPU], [MIGRATION_LLC], [MIGRATION_NODE]
  std::vector<CounterDef> counters;
  for (const char* scope : {"cpu", "llc", "node"})
    counters.push_back({0, &metrics::kMigrations, "scope", scope});
  return loadObject<migration_counts>(BPFTRAIN_SKELETON(migrations), kProbes, env, notes,
                                      std::move(counters), rodata);
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::migrations
