// numa_moves: the scheduler's NUMA placement decisions for target tasks (sched:sched_move_numa,
// sched_swap_numa, sched_stick_numa), one counter per kind.
#include "bpf/numa_moves.h"

#include "collector/loader/probe_module.h"
#include "numa_moves.skel.h"

namespace bpftrain::collector::loader::probes::numa_moves {
namespace {

const ProbeDef kProbes[] = {
    {"numa_moves",
     {"on_move_numa", "on_swap_numa", "on_stick_numa"},
     "tracepoints sched:sched_{move,swap,stick}_numa"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  // numa_move_counts.kind[NUMA_MOVE], [NUMA_SWAP], [NUMA_STICK]
  std::vector<CounterDef> counters;
  for (const char* kind : {"move", "swap", "stick"})
    counters.push_back({0, &metrics::kNumaTaskMoves, "kind", kind});
  return loadObject<numa_move_counts>(BPFTRAIN_SKELETON(numa_moves), kProbes, env, notes,
                                      std::move(counters));
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::numa_moves
