// numa_moves: the scheduler's NUMA placement decisions for target tasks (sched:sched_move_numa,
// sched_swap_numa, sched_stick_numa), one counter per kind.
#include "bpf/numa_moves.h"

#include "collector/loader/probe_module.h"
#include "numa_moves.skel.h"

namespace bpftrain::collector::loader::probes::numa_moves {
namespace {

class Module final : public ProbeModule {
 public:
  std::span<const ProbeDef> probes() const override {
    static const ProbeDef kProbes[] = {
        {"numa_moves",
         {"on_move_numa", "on_swap_numa", "on_stick_numa"},
         "tracepoints sched:sched_{move,swap,stick}_numa"},
    };
    return kProbes;
  }

  Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) const override {
    auto obj = std::make_unique<ProbeObject>();
    numa_moves_bpf* skel = nullptr;
    BPFTRAIN_TRY(obj->openSkeleton(skel, numa_moves_bpf__open, numa_moves_bpf__destroy,
                                   "numa_moves", probes(), env, notes));
    BPFTRAIN_TRY(obj->loadSkeleton(skel, numa_moves_bpf__load, "numa_moves"));
    // numa_move_counts.kind[NUMA_MOVE], [NUMA_SWAP], [NUMA_STICK]
    std::vector<CounterDef> counters;
    for (const char* kind : {"move", "swap", "stick"})
      counters.push_back({0, &metrics::kNumaTaskMoves, "kind", kind});
    BPFTRAIN_TRY(obj->setCounters<numa_move_counts>(skel->maps.counts, env, std::move(counters)));
    return obj;
  }
};

}  // namespace

const ProbeModule& module() {
  static const Module kModule;
  return kModule;
}

}  // namespace bpftrain::collector::loader::probes::numa_moves
