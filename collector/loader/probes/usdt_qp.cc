// usdt_qp: RDMA queue pairs seen through the USDT probes bpftrain:qp_post / bpftrain:qp_complete
// (bpf/usdt/bpftrain_usdt.h). USDT probes live in a process's binary, so the programs attach per
// target process, not at load; a process whose binary has no bpftrain notes is simply not one.
#include "bpf/usdt_qp.h"

#include <filesystem>

#include "collector/loader/probe_module.h"
#include "usdt_qp.skel.h"

namespace bpftrain::collector::loader::probes::usdt_qp {
namespace {

class Object final : public RingProbeObject<qp_sample, 1> {
 public:
  // Nothing attaches at load: only finds the programs, which attachTarget uses.
  Status attach(size_t, const ProbeDef& def) override {
    for (std::string_view name : def.programs) {
      bpf_program* prog = bpf_object__find_program_by_name(object(), std::string(name).c_str());
      if (!prog) return Status::error("program " + std::string(name) + " missing from the object");
      programs_.push_back(prog);
    }
    return {};
  }

  Status attachTarget(uint32_t tgid, std::vector<LinkPtr>& links) override {
    std::error_code ec;
    const std::string path =
        std::filesystem::read_symlink("/proc/" + std::to_string(tgid) + "/exe", ec).string();
    if (ec) return {};  // gone already
    for (bpf_program* prog : programs_) {
      // on_qp_post -> bpftrain:qp_post
      const std::string probe = std::string(bpf_program__name(prog)).substr(3);
      bpf_link* link = nullptr;
      Status status = check("cannot attach USDT bpftrain:" + probe + " in " + path, link, [&] {
        return bpf_program__attach_usdt(prog, static_cast<pid_t>(tgid), path.c_str(), "bpftrain",
                                        probe.c_str(), nullptr);
      });
      // A binary without bpftrain USDT notes (it posts no RDMA work requests) is not an error.
      if (!status.ok() && status.err() == ENOENT) continue;
      if (!status.ok()) return status;
      links.emplace_back(link);
    }
    return {};
  }

  void onSample(const qp_sample& sample) override {
    if (!sink().live(sample.slot)) return;
    auto& ids = series_[sample.slot];
    if (!series_.known(sample.slot))
      ids[0] = sink().series(sample.slot, metrics::kTransportOutstandingWorkRequests, "transport",
                             "rdma");
    sink().record(ids[0], sample.outstanding);
  }

 private:
  std::vector<bpf_program*> programs_;
};

const ProbeDef kProbes[] = {
    {"rdma_usdt",
     {"on_qp_post", "on_qp_complete"},
     "USDT bpftrain:qp_post / bpftrain:qp_complete (per target process)"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  // qp_counts.posts, qp_counts.completions
  return loadObject<qp_counts, Object>(BPFTRAIN_SKELETON(usdt_qp), kProbes, env, notes,
                                       {{0, &metrics::kRdmaQpEvents, "event", "post"},
                                        {0, &metrics::kRdmaQpEvents, "event", "complete"}});
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::usdt_qp
