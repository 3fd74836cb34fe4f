// usdt_qp: RDMA queue pairs seen through the USDT probes bpftrain:qp_post / bpftrain:qp_complete
// (bpf/usdt/bpftrain_usdt.h). USDT probes live in a process's binary, so the programs attach per
// target process, not at load; a process whose binary has no bpftrain notes is simply not one.
#include "bpf/usdt_qp.h"

#include <filesystem>

#include "collector/loader/probe_module.h"
#include "usdt_qp.skel.h"

namespace bpftrain::collector::loader::probes::usdt_qp {
namespace {

class Object final : public ProbeObject {
 public:
  Status openRing(const bpf_map* samples) {
    auto ring = RingReader<qp_sample>::open(samples, this);
    if (!ring.ok()) return ring.status();
    ring_ = ring.take();
    return {};
  }

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

  Status consume(SampleSink& sink) override {
    sink_ = &sink;
    Status status = ring_.consume();
    sink_ = nullptr;
    return status;
  }

  void releaseSlot(uint32_t slot) override { series_.forget(slot); }

  void onSample(const qp_sample& sample) {
    if (!sink_->live(sample.slot)) return;
    auto& ids = series_[sample.slot];
    if (!series_.known(sample.slot))
      ids[0] = sink_->series(sample.slot, metrics::kTransportOutstandingWorkRequests, "transport",
                             "rdma");
    sink_->record(ids[0], sample.outstanding);
  }

 private:
  std::vector<bpf_program*> programs_;
  RingReader<qp_sample> ring_;
  SlotSeries<1> series_;
  SampleSink* sink_ = nullptr;  // set while consuming
};

class Module final : public ProbeModule {
 public:
  std::span<const ProbeDef> probes() const override {
    static const ProbeDef kProbes[] = {
        {"rdma_usdt",
         {"on_qp_post", "on_qp_complete"},
         "USDT bpftrain:qp_post / bpftrain:qp_complete (per target process)"},
    };
    return kProbes;
  }

  Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) const override {
    auto obj = std::make_unique<Object>();
    usdt_qp_bpf* skel = nullptr;
    BPFTRAIN_TRY(obj->openSkeleton(skel, usdt_qp_bpf__open, usdt_qp_bpf__destroy, "usdt_qp",
                                   probes(), env, notes));
    BPFTRAIN_TRY(obj->loadSkeleton(skel, usdt_qp_bpf__load, "usdt_qp"));
    // qp_counts.posts, qp_counts.completions
    BPFTRAIN_TRY(obj->setCounters<qp_counts>(skel->maps.counts, env,
                                             {{0, &metrics::kRdmaQpEvents, "event", "post"},
                                              {0, &metrics::kRdmaQpEvents, "event", "complete"}}));
    BPFTRAIN_TRY(obj->setLost(skel->maps.lost, env, 0));
    BPFTRAIN_TRY(obj->openRing(skel->maps.samples));
    return obj;
  }
};

}  // namespace

const ProbeModule& module() {
  static const Module kModule;
  return kModule;
}

}  // namespace bpftrain::collector::loader::probes::usdt_qp
