// rdma_verbs: work requests of Gloo's ibverbs transport (bpf/rdma_verbs.bpf.c), from uprobes on
// gloo::transport::ibverbs::Pair's exported functions. They live in the libgloo a process maps, so
// the programs attach per target process, by symbol name, in that mapping (seen through
// /proc/PID/root, so a rank in another mount namespace is found too); a process that maps no
// libgloo posts no work requests through Gloo and is simply not one.
#include "bpf/rdma_verbs.h"

#include <fstream>
#include <string>

#include "collector/loader/probe_module.h"
#include "rdma_verbs.skel.h"

namespace bpftrain::collector::loader::probes::rdma_verbs {
namespace {

// Program -> the Pair member it enters (Itanium mangling, as libgloo.so exports them).
struct Entry {
  std::string_view program;
  std::string_view symbol;
};
constexpr Entry kEntries[] = {
    {"on_pair_send", "_ZN4gloo9transport7ibverbs4Pair4sendEPNS1_6BufferEmmm"},
    {"on_pair_send_memory_region", "_ZN4gloo9transport7ibverbs4Pair16sendMemoryRegionEP6ibv_mri"},
    {"on_pair_post_receive", "_ZN4gloo9transport7ibverbs4Pair11postReceiveEv"},
    {"on_pair_handle_completion", "_ZN4gloo9transport7ibverbs4Pair16handleCompletionEP6ibv_wc"},
};

// The libgloo a process maps, as a path this process can open; "" when it maps none.
std::string glooOf(uint32_t tgid) {
  const std::string proc = "/proc/" + std::to_string(tgid);
  std::ifstream maps(proc + "/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t path = line.find('/');
    if (path == std::string::npos) continue;
    const std::string file = line.substr(path);
    const size_t base = file.rfind('/');
    if (file.compare(base + 1, 10, "libgloo.so") == 0) return proc + "/root" + file;
  }
  return {};
}

constexpr size_t kOutstanding = 0, kCompletion = 1;

class Object final : public RingProbeObject<rdma_verbs_sample, 2> {
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
    const std::string gloo = glooOf(tgid);
    if (gloo.empty()) return {};  // no Gloo in this process (or it is gone)
    for (bpf_program* prog : programs_) {
      std::string_view symbol;
      for (const Entry& e : kEntries)
        if (e.program == bpf_program__name(prog)) symbol = e.symbol;
      const std::string func(symbol);
      LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = func.c_str());
      bpf_link* link = nullptr;
      BPFTRAIN_TRY(check("cannot attach uprobe " + func + " in " + gloo, link, [&] {
        return bpf_program__attach_uprobe_opts(prog, static_cast<pid_t>(tgid), gloo.c_str(), 0,
                                               &opts);
      }));
      links.emplace_back(link);
    }
    return {};
  }

  void onSample(const rdma_verbs_sample& sample) override {
    if (!sink().live(sample.slot)) return;
    auto& ids = series_[sample.slot];
    if (!series_.known(sample.slot)) {
      const window::Label source{"source", "gloo"};
      ids[kOutstanding] = sink().series(sample.slot, metrics::kRdmaOutstandingWorkRequests,
                                        std::span<const window::Label>(&source, 1));
      ids[kCompletion] = sink().series(sample.slot, metrics::kRdmaCompletionSeconds,
                                       std::span<const window::Label>(&source, 1));
    }
    sink().record(ids[kOutstanding], sample.outstanding);
    if (sample.completion_ns > 0) sink().record(ids[kCompletion], sample.completion_ns * 1e-9);
  }

 private:
  std::vector<bpf_program*> programs_;
};

const ProbeDef kProbes[] = {
    {"rdma_verbs",
     {"on_pair_send", "on_pair_send_memory_region", "on_pair_post_receive",
      "on_pair_handle_completion"},
     "uprobes gloo::transport::ibverbs::Pair::{send,sendMemoryRegion,postReceive,"
     "handleCompletion} (per target process, in its libgloo)"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  // rdma_verbs_counts: posted[write, send, recv], completed[write, send, recv], write_bytes,
  // unmatched
  // Every series says source="gloo" (rdma_rxe counts the same work requests from the kernel).
  const auto op = [](const metrics::MetricDef& metric, const char* value) {
    return CounterDef{0, &metric, "op", value, true, "source", "gloo"};
  };
  return loadObject<rdma_verbs_counts, Object>(
      BPFTRAIN_SKELETON(rdma_verbs), kProbes, env, notes,
      {op(metrics::kRdmaWorkRequests, "write"),
       op(metrics::kRdmaWorkRequests, "send"),
       op(metrics::kRdmaWorkRequests, "recv"),
       op(metrics::kRdmaWorkCompletions, "write"),
       op(metrics::kRdmaWorkCompletions, "send"),
       op(metrics::kRdmaWorkCompletions, "recv"),
       {0, &metrics::kRdmaBytes, "source", "gloo"},
       {0, &metrics::kRdmaUnmatchedCompletions, "source", "gloo"}});
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::rdma_verbs
