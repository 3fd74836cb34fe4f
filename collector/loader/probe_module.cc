#include "collector/loader/probe_module.h"

#include <cctype>

#include "collector/loader/host_facts.h"

namespace bpftrain::collector::loader {

std::vector<CounterDef> enumCounters(size_t probe, const metrics::MetricDef& metric,
                                     const char* label, const char* kernel_enum,
                                     const char* strip_prefix, size_t values) {
  const std::vector<std::string> names = kernelEnumNames(kernel_enum, strip_prefix, values);
  std::vector<CounterDef> out;
  for (size_t i = 0; i < values; ++i) {
    const bool named = i < names.size() && !names[i].empty();
    out.push_back({probe, &metric, label, named ? names[i] : std::to_string(i), named});
  }
  return out;
}

Status ProbeObject::attach(size_t, const ProbeDef& def) {
  for (std::string_view name : def.programs) {
    bpf_program* prog = bpf_object__find_program_by_name(object_, std::string(name).c_str());
    if (!prog) return Status::error("program " + std::string(name) + " missing from the object");
    bpf_link* link = nullptr;
    BPFTRAIN_TRY(check(std::string("cannot attach ") + bpf_program__section_name(prog), link,
                       [&] { return bpf_program__attach(prog); }));
    addLink(link);
  }
  return {};
}

Status ProbeObject::attachTarget(uint32_t, std::vector<LinkPtr>&) { return {}; }

void ProbeObject::detachTarget(uint32_t, uint32_t) {}

Status ProbeObject::consume(SampleSink&) { return {}; }

void ProbeObject::releaseSlot(uint32_t) {}

Status ProbeObject::setLost(const bpf_map* map, const ProbeEnv& env, size_t probe) {
  auto bound = PerCpuArray<uint64_t>::bind(map, env.ncpus);
  if (!bound.ok()) return bound.status();
  lost_ = bound.take();
  lost_probe_ = probe;
  return {};
}

Status ProbeObject::prepare(bpf_map* target_tgids, bpf_map* target_cgroups,
                            std::span<const ProbeDef> defs, const ProbeEnv& env, LoadNotes& notes) {
  // One write per target change then serves every object.
  BPFTRAIN_TRY(env.target_tgids.reuseIn(target_tgids));
  BPFTRAIN_TRY(env.target_cgroups.reuseIn(target_cgroups));
  // A tp_btf program whose tracepoint this kernel lacks would fail the whole object: leave it
  // out and let its probe report why.
  bpf_program* prog;
  bpf_object__for_each_program(prog, object_) {
    const std::string section = bpf_program__section_name(prog);
    if (section.rfind("tp_btf/", 0) != 0 || kernelHasRawTracepoint(section.substr(7))) continue;
    BPFTRAIN_TRY(check("cannot leave out " + section,
                       [&] { return bpf_program__set_autoload(prog, false); }));
    for (size_t i = 0; i < defs.size(); ++i)
      for (std::string_view name : defs[i].programs)
        if (name == bpf_program__name(prog))
          notes.markDown(i, "tracepoint " + section.substr(7) + " does not exist in this kernel");
  }
  return {};
}

}  // namespace bpftrain::collector::loader
