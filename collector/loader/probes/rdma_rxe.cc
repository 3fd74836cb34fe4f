// rdma_rxe: work requests of any verbs program on soft-RoCE, from three functions of the rdma_rxe
// module (bpf/rdma_rxe.bpf.c): posted by op at each send-queue doorbell, completed per send WQE and
// per receive completion, write bytes, post -> completion latency (sampled) and outstanding send
// WQEs, under the rdma_verbs metrics with source="rxe". Attached by fentry where the kernel builds
// BPF trampolines for the module's functions, by kprobes otherwise (checked at load and attach:
// the fentry programs must load and attach, else the kprobes go in, and the log says which). Up
// where the kernel has kprobes and rdma_rxe is loaded with its three functions traceable (Debian's
// 6.1 in numalab); down elsewhere (6.18 here has no kprobes), saying why, with the programs left
// unloaded so that nothing else depends on it.
#include "bpf/rdma_rxe.h"

#include <cstdio>
#include <string>

#include "collector/loader/probe_module.h"
#include "collector/loader/rdma_source.h"
#include "rdma_rxe.skel.h"

namespace bpftrain::collector::loader::probes::rdma_rxe {
namespace {

// Every program the probe may run: its run time is read from whichever set attached.
const ProbeDef kProbes[] = {
    {"rdma_rxe",
     {"on_post_send_fentry", "on_do_complete_fentry", "on_cq_post_fentry", "on_post_send",
      "on_do_complete", "on_cq_post"},
     "fentry (else kprobes) rdma_rxe rxe_post_send (doorbell), do_complete (send WQE retired), "
     "rxe_cq_post (receive completions)"},
};
constexpr const char* kFentry[] = {"on_post_send_fentry", "on_do_complete_fentry",
                                   "on_cq_post_fentry"};
constexpr const char* kKprobes[] = {"on_post_send", "on_do_complete", "on_cq_post"};

// Per slot: the rank's outstanding and completion series, then one per QP label (0-7, other).
constexpr size_t kOutstanding = 0, kCompletion = 1, kQp = 2;
constexpr size_t kSeries = kQp + RDMA_RXE_QP_LABELS + 1;

class Object final : public RingProbeObject<rdma_rxe_sample, kSeries> {
 public:
  // Why the fentry programs are not loaded ("" when they are).
  std::string no_fentry;

  Status attach(size_t, const ProbeDef&) override {
    std::string why = no_fentry;
    if (why.empty()) {
      if (Status status = attachAll(kFentry); status.ok()) {
        std::fprintf(stderr, "bpftrain: rdma_rxe: attached by fentry\n");
        return {};
      } else {
        why = status.message();
      }
    }
    BPFTRAIN_TRY(attachAll(kKprobes));
    std::fprintf(stderr, "bpftrain: rdma_rxe: attached by kprobes (no fentry: %s)\n", why.c_str());
    return {};
  }
  void onSample(const rdma_rxe_sample& sample) override {
    if (!sink().live(sample.slot)) return;
    auto& ids = series_[sample.slot];
    const window::Label source{"source", "rxe"};
    if (!series_.known(sample.slot)) {
      ids[kOutstanding] = sink().series(sample.slot, metrics::kRdmaOutstandingWorkRequests,
                                        std::span<const window::Label>(&source, 1));
      ids[kCompletion] = sink().series(sample.slot, metrics::kRdmaCompletionSeconds,
                                       std::span<const window::Label>(&source, 1));
    }
    const size_t qp = sample.qp < RDMA_RXE_QP_LABELS ? sample.qp : RDMA_RXE_QP_LABELS;
    window::SeriesId& qp_id = ids[kQp + qp];
    if (qp_id == SlotSeries<kSeries>::kUnset) {
      static const std::string kNames[] = {"0", "1", "2", "3", "4", "5", "6", "7", "other"};
      static_assert(std::size(kNames) == RDMA_RXE_QP_LABELS + 1);
      const window::Label labels[] = {source, {"qp", kNames[qp]}};
      qp_id = sink().series(sample.slot, metrics::kRdmaQpOutstandingWorkRequests, labels);
    }
    sink().record(ids[kOutstanding], sample.outstanding);
    sink().record(qp_id, sample.qp_outstanding);
    if (sample.completion_ns > 0) sink().record(ids[kCompletion], sample.completion_ns * 1e-9);
  }

 private:
  // All three or none: a set that attached in part is detached again.
  Status attachAll(std::span<const char* const> names) {
    std::vector<LinkPtr> links;
    for (const char* name : names) {
      bpf_program* prog = bpf_object__find_program_by_name(object(), name);
      if (!prog || bpf_program__fd(prog) < 0)
        return Status::error(std::string("program ") + name + " not loaded");
      bpf_link* link = nullptr;
      BPFTRAIN_TRY(check(std::string("cannot attach ") + bpf_program__section_name(prog), link,
                         [&] { return bpf_program__attach(prog); }));
      links.emplace_back(link);
    }
    for (LinkPtr& link : links) addLink(link.release());
    return {};
  }
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  const std::string why = rxeKprobesUnavailable();
  const auto op = [](const metrics::MetricDef& metric, const char* value) {
    return CounterDef{0, &metric, "op", value, true, "source", "rxe"};
  };
  std::vector<CounterDef> counters = {op(metrics::kRdmaWorkRequests, "write"),
                                      op(metrics::kRdmaWorkRequests, "send"),
                                      CounterDef{},  // receives are never posted through the kernel
                                      op(metrics::kRdmaWorkRequests, "read"),
                                      op(metrics::kRdmaWorkRequests, "atomic"),
                                      op(metrics::kRdmaWorkRequests, "other"),
                                      op(metrics::kRdmaWorkCompletions, "write"),
                                      op(metrics::kRdmaWorkCompletions, "send"),
                                      op(metrics::kRdmaWorkCompletions, "recv"),
                                      op(metrics::kRdmaWorkCompletions, "read"),
                                      op(metrics::kRdmaWorkCompletions, "atomic"),
                                      op(metrics::kRdmaWorkCompletions, "other"),
                                      {0, &metrics::kRdmaBytes, "source", "rxe"},
                                      {0, &metrics::kRdmaUnmatchedCompletions, "source", "rxe"},
                                      {0, &metrics::kRdmaQpsFolded, "source", "rxe"}};
  // fentry first where the probe can run at all; a kernel that cannot load those programs (no
  // trampolines, no BTF for the module's functions) gets the kprobes alone.
  std::string no_fentry = why;
  if (no_fentry.empty() && env.options.rdma_rxe_kprobes) no_fentry = "--rdma-rxe-attach kprobe";
  auto loaded = loadPreferredElseFallback(no_fentry, [&](bool fentry) {
    return loadObject<rdma_rxe_counts, Object>(
        BPFTRAIN_SKELETON(rdma_rxe), kProbes, env, notes, counters, [&](rdma_rxe_bpf* skel) {
          bpf_program* const fentry_progs[] = {skel->progs.on_post_send_fentry,
                                               skel->progs.on_do_complete_fentry,
                                               skel->progs.on_cq_post_fentry};
          bpf_program* const kprobe_progs[] = {skel->progs.on_post_send, skel->progs.on_do_complete,
                                               skel->progs.on_cq_post};
          if (!fentry || !why.empty())
            for (bpf_program* prog : fentry_progs) bpf_program__set_autoload(prog, false);
          if (why.empty()) return;
          // Loaded without its programs (their CO-RE types live in rdma_rxe's BTF): the object
          // still carries the counters the service reads.
          for (bpf_program* prog : kprobe_progs) bpf_program__set_autoload(prog, false);
          notes.markDown(0, why);
        });
  });
  if (loaded.ok()) static_cast<Object&>(*loaded.value()).no_fentry = no_fentry;
  return loaded;
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::rdma_rxe
