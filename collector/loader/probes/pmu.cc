// pmu: hardware PMU events (PERF_TYPE_HW_CACHE dTLB/iTLB read misses, node read misses and
// accesses). Each probe opens one sampling perf event per CPU and attaches its perf_event program
// to it; a machine without the event (no PMU: VMs, this CI) gets the probe down with why.
#include "bpf/pmu.h"

#include <linux/perf_event.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <iterator>

#include "collector/loader/probe_module.h"
#include "pmu.skel.h"

namespace bpftrain::collector::loader::probes::pmu {
namespace {

struct Event {
  uint32_t cache;   // PERF_COUNT_HW_CACHE_*
  uint32_t result;  // PERF_COUNT_HW_CACHE_RESULT_*
};

// Indexed like probes() and like pmu_counts.events (enum pmu_event).
constexpr Event kEvents[] = {
    {PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_RESULT_MISS},
    {PERF_COUNT_HW_CACHE_ITLB, PERF_COUNT_HW_CACHE_RESULT_MISS},
    {PERF_COUNT_HW_CACHE_NODE, PERF_COUNT_HW_CACHE_RESULT_MISS},
    {PERF_COUNT_HW_CACHE_NODE, PERF_COUNT_HW_CACHE_RESULT_ACCESS},
};
static_assert(std::size(kEvents) == PMU_EVENTS);

class Object final : public ProbeObject {
 public:
  Object(int ncpus, uint64_t sample_period) : ncpus_(ncpus), sample_period_(sample_period) {}

  Status attach(size_t probe, const ProbeDef& def) override {
    perf_event_attr attr{};
    attr.type = PERF_TYPE_HW_CACHE;
    attr.size = sizeof(attr);
    attr.config =
        kEvents[probe].cache | (PERF_COUNT_HW_CACHE_OP_READ << 8) | (kEvents[probe].result << 16);
    attr.sample_period = sample_period_;
    const std::string program(def.programs[0]);
    bpf_program* prog = bpf_object__find_program_by_name(object(), program.c_str());
    if (!prog) return Status::error("program " + program + " missing from the object");
    std::vector<LinkPtr> links;  // kept only if every CPU attaches
    for (int cpu = 0; cpu < ncpus_; ++cpu) {
      UniqueFd event(
          static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC)));
      if (!event.valid()) {
        const int err = errno;
        if (err == ENODEV && cpu > 0) continue;  // offline CPU
        return Status::error(std::string(err == ENOENT || err == EOPNOTSUPP || err == EINVAL
                                             ? "no hardware PMU for this event on this machine"
                                             : "cannot open the PMU event") +
                             " (perf_event_open PERF_TYPE_HW_CACHE: " + errnoText(err) + ")")
            .withErrno(err);
      }
      bpf_link* link = nullptr;
      BPFTRAIN_TRY(check("cannot attach to the PMU event", link,
                         [&] { return bpf_program__attach_perf_event(prog, event.get()); }));
      event.release();  // the perf link closes the event fd when it is destroyed
      links.emplace_back(link);
    }
    for (auto& link : links) addLink(link.release());
    return {};
  }

 private:
  int ncpus_;
  uint64_t sample_period_;
};

const ProbeDef kProbes[] = {
    {"dtlb_misses", {"on_dtlb_miss"}, "PMU PERF_TYPE_HW_CACHE dTLB read miss"},
    {"itlb_misses", {"on_itlb_miss"}, "PMU PERF_TYPE_HW_CACHE iTLB read miss"},
    {"node_load_misses", {"on_node_load_miss"}, "PMU PERF_TYPE_HW_CACHE node read miss"},
    {"node_loads", {"on_node_load"}, "PMU PERF_TYPE_HW_CACHE node read access"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  auto obj = std::make_unique<Object>(env.ncpus, env.options.pmu_sample_period);
  pmu_bpf* skel = nullptr;
  // pmu_counts.events[enum pmu_event]: probe i counts word i.
  BPFTRAIN_TRY(
      obj->openAndLoad<pmu_counts>(skel, BPFTRAIN_SKELETON(pmu), kProbes, env, notes,
                                   {{PMU_DTLB_MISSES, &metrics::kDtlbMisses, "", ""},
                                    {PMU_ITLB_MISSES, &metrics::kItlbMisses, "", ""},
                                    {PMU_NODE_LOAD_MISSES, &metrics::kNodeLoadMisses, "", ""},
                                    {PMU_NODE_LOADS, &metrics::kNodeLoads, "", ""}}));
  return obj;
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::pmu
