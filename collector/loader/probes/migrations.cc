// migrations: sched:sched_migrate_task per target, classified cpu / llc / node with a CPU ->
// (node, LLC) table from sysfs, written into the object's rodata before load.
#include "bpf/migrations.h"

#include <map>

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
    // LLC ids are numbered densely (at most one per CPU) so that each fits the domain's low 16
    // bits; nodes fit the high ones (MAX_NUMNODES is at most 1024).
    std::map<uint32_t, uint32_t> llc_index;
    for (size_t c = 0; c < topo.llc.size() && c < BPFTRAIN_MAX_CPUS; ++c) {
      const uint32_t llc =
          llc_index.try_emplace(topo.llc[c], static_cast<uint32_t>(llc_index.size())).first->second;
      skel->rodata->cpu_domain[c] = (static_cast<uint32_t>(topo.node[c]) << 16) | llc;
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
