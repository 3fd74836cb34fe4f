// rdma_verbs: work requests of Gloo's ibverbs transport (bpf/rdma_verbs.bpf.c), from uprobes on
// gloo::transport::ibverbs::Pair's exported functions. They live in the libgloo a process maps, so
// the programs attach per target process, by symbol name, in that mapping (seen through
// /proc/PID/root, so a rank in another mount namespace is found too); a process that maps no
// libgloo posts no work requests through Gloo and is simply not one. Under --rdma-sources auto
// (collector/loader/rdma_source.h) a process gets the uprobes unless every verbs device it has
// open is one rdma_rxe's kernel probes see: a work request is counted once, by the cheaper side.
// Where rdma_rxe is up, a process waits for its first device (no work request can be posted
// before), checked each step; the choice is logged once per process and exported as
// bpftrain_rdma_source_info. The completion program is the sleepable one where the kernel loads
// it (6.0 and later), else the non-faulting one (bpf/rdma_verbs.bpf.c says why); the log says
// which when it is the latter.
#include "bpf/rdma_verbs.h"

#include <array>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "collector/loader/probe_module.h"
#include "collector/loader/rdma_source.h"
#include "rdma_verbs.skel.h"

namespace bpftrain::collector::loader::probes::rdma_verbs {
namespace {

// Program -> the Pair member it enters (Itanium mangling, as libgloo.so exports them).
struct Entry {
  std::string_view program;
  std::string_view symbol;
};
// Pair::handleCompletion(ibv_wc*): both completion programs (one loaded) enter it.
constexpr std::string_view kHandleCompletion =
    "_ZN4gloo9transport7ibverbs4Pair16handleCompletionEP6ibv_wc";
constexpr Entry kEntries[] = {
    {"on_pair_send", "_ZN4gloo9transport7ibverbs4Pair4sendEPNS1_6BufferEmmm"},
    {"on_pair_send_memory_region", "_ZN4gloo9transport7ibverbs4Pair16sendMemoryRegionEP6ibv_mri"},
    {"on_pair_post_receive", "_ZN4gloo9transport7ibverbs4Pair11postReceiveEv"},
    {"on_pair_handle_completion", kHandleCompletion},
    {"on_pair_handle_completion_sleepable", kHandleCompletion},
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
  // Nothing attaches at load: only finds the programs, which attachTarget uses (of the two
  // completion programs, the one loaded).
  Status attach(size_t, const ProbeDef& def) override {
    for (std::string_view name : def.programs) {
      bpf_program* prog = bpf_object__find_program_by_name(object(), std::string(name).c_str());
      if (!prog) return Status::error("program " + std::string(name) + " missing from the object");
      if (bpf_program__fd(prog) >= 0) programs_.push_back(prog);
    }
    return {};
  }

  void configure(const ProbeEnv& env) {
    sources_ = env.options.rdma_sources;
    proc_root_ = env.options.proc_root;
    infiniband_class_ = env.options.rdma_sysfs_root;
    const size_t parent = infiniband_class_.rfind('/');
    verbs_class_ =
        (parent == std::string::npos ? std::string(".") : infiniband_class_.substr(0, parent)) +
        "/infiniband_verbs";
    target_tgids_ = &env.target_tgids;
    kernel_sees_rxe_ = rxeKprobesUnavailable().empty();
  }

  Status attachTarget(uint32_t tgid, std::vector<LinkPtr>& links) override {
    // /proc/PID/maps is read once per process: the path is kept for a later decision.
    std::string gloo = glooOf(tgid);
    if (gloo.empty()) return {};  // no Gloo in this process (or it is gone)
    if (sources_ == RdmaSources::kAll) return attachUprobes(tgid, gloo, links);
    Target& target = targets_[tgid];
    target.slot = target_tgids_->slotOf(tgid);
    target.gloo = std::move(gloo);
    return decide(tgid, target);
  }

  void detachTarget(uint32_t, uint32_t tgid) override { targets_.erase(tgid); }

  void forgetSlot(uint32_t slot) override {
    std::erase_if(targets_, [slot](const auto& t) { return t.second.slot == slot; });
    info_.erase(slot);
  }

  // Pending processes: decided once they have a device open. Decided ones: their choice, each
  // step, as a gauge on their rank.
  void onStep() override {
    for (auto& [tgid, target] : targets_) {
      if (target.choice == RdmaSourceChoice::kUndecided)
        if (Status status = decide(tgid, target); !status.ok())
          std::fprintf(stderr, "bpftrain: rdma_verbs: %s\n", status.message().c_str());
      if (target.choice == RdmaSourceChoice::kUndecided || !sink().live(target.slot)) continue;
      const bool kernel = target.choice == RdmaSourceChoice::kKernel;
      auto [it, fresh] = info_.try_emplace(target.slot);
      if (fresh) it->second.fill(SlotSeries<1>::kUnset);
      auto& ids = it->second;
      window::SeriesId& id = ids[kernel ? 0 : 1];
      if (id == SlotSeries<1>::kUnset) {
        const window::Label source{"source", name(target.choice)};
        id = sink().series(target.slot, metrics::kRdmaSourceInfo,
                           std::span<const window::Label>(&source, 1));
      }
      sink().record(id, 1.0);
    }
  }

 private:
  struct Target {
    uint32_t slot = 0;
    RdmaSourceChoice choice = RdmaSourceChoice::kUndecided;
    std::string gloo;            // the libgloo it maps, as glooOf() found it at attachTarget
    std::vector<LinkPtr> links;  // its uprobes, when the choice is kUprobes
  };

  Status decide(uint32_t tgid, Target& target) {
    const std::vector<std::string> devices = verbsDevicesOf(proc_root_, tgid, verbs_class_);
    target.choice = chooseRdmaSource(devices, kernel_sees_rxe_, [&](const std::string& device) {
      return isSoftRoce(infiniband_class_, device);
    });
    if (target.choice == RdmaSourceChoice::kUndecided) return {};
    std::string list;
    for (const auto& d : devices) list += (list.empty() ? "" : ",") + d;
    if (list.empty()) list = "no verbs device yet";
    std::fprintf(stderr,
                 "bpftrain: rdma: pid %u on %s: work requests from %s (--rdma-sources auto; "
                 "bpftrain_rdma_source_info{source=\"%s\"})\n",
                 tgid, list.c_str(),
                 target.choice == RdmaSourceChoice::kKernel
                     ? "rdma_rxe's kernel probes, no rdma_verbs uprobes"
                     : "rdma_verbs' uprobes (a device the kernel side cannot see)",
                 std::string(name(target.choice)).c_str());
    if (target.choice == RdmaSourceChoice::kUprobes)
      return attachUprobes(tgid, target.gloo, target.links);
    return {};
  }

  // gloo: the process's libgloo, from glooOf().
  Status attachUprobes(uint32_t tgid, const std::string& gloo, std::vector<LinkPtr>& links) {
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
  RdmaSources sources_ = RdmaSources::kAuto;
  std::string proc_root_, infiniband_class_, verbs_class_;
  const TgidSlotTable* target_tgids_ = nullptr;
  bool kernel_sees_rxe_ = false;
  std::map<uint32_t, Target> targets_;                        // under auto: tgid -> its choice
  std::map<uint32_t, std::array<window::SeriesId, 2>> info_;  // slot -> source_info (rxe, gloo)
};

const ProbeDef kProbes[] = {
    {"rdma_verbs",
     {"on_pair_send", "on_pair_send_memory_region", "on_pair_post_receive",
      "on_pair_handle_completion_sleepable", "on_pair_handle_completion"},
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
  const std::vector<CounterDef> counters = {
      op(metrics::kRdmaWorkRequests, "write"),
      op(metrics::kRdmaWorkRequests, "send"),
      op(metrics::kRdmaWorkRequests, "recv"),
      op(metrics::kRdmaWorkCompletions, "write"),
      op(metrics::kRdmaWorkCompletions, "send"),
      op(metrics::kRdmaWorkCompletions, "recv"),
      {0, &metrics::kRdmaBytes, "source", "gloo"},
      {0, &metrics::kRdmaUnmatchedCompletions, "source", "gloo"}};
  // The sleepable completion program first; a kernel without sleepable uprobes (before 6.0)
  // refuses the whole object, which then loads with the non-faulting one.
  std::string no_sleepable =
      env.options.rdma_verbs_nonfaulting ? "--rdma-verbs-read nonfaulting" : "";
  auto loaded = loadPreferredElseFallback(no_sleepable, [&](bool sleepable) {
    return loadObject<rdma_verbs_counts, Object>(
        BPFTRAIN_SKELETON(rdma_verbs), kProbes, env, notes, counters, [&](rdma_verbs_bpf* skel) {
          bpf_program__set_autoload(sleepable ? skel->progs.on_pair_handle_completion
                                              : skel->progs.on_pair_handle_completion_sleepable,
                                    false);
        });
  });
  if (!loaded.ok()) return loaded;
  if (!no_sleepable.empty())
    std::fprintf(stderr,
                 "bpftrain: rdma_verbs: completions read without faulting (not the sleepable "
                 "program: %s); one whose ibv_wc page NUMA balancing has just unmapped is counted "
                 "as lost\n",
                 no_sleepable.c_str());
  static_cast<Object*>(loaded.value().get())->configure(env);
  return loaded;
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::rdma_verbs
