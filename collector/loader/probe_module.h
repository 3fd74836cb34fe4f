// A probe module owns everything particular to one BPF stem, as x.c does for x.bpf.c in
// libbpf-tools: the probes users see (names, programs, source), the object's read-only
// configuration, open/load/attach, what each u64 of its per-slot counter struct means, its ring
// buffer handler and which probe its lost events belong to. ProbeService keeps what is common:
// lifecycle, targets (slots, the tgid table and cgroup map), bpf_stats, --list-probes and reading
// the counters. A module is collector/loader/probes/<stem>.cc plus its line in the module list
// (collector/loader/CMakeLists.txt); docs/architecture.md "Adding a probe" walks through one.
#pragma once

#include <bpf/libbpf.h>

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bpf/lib/targets.h"
#include "collector/loader/bpf_handles.h"
#include "collector/loader/bpf_maps.h"
#include "collector/loader/libbpf_check.h"
#include "collector/loader/probe_service.h"
#include "collector/loader/tgid_slot_table.h"
#include "collector/window/series_store.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::loader {

// One probe as the user sees it (--list-probes, bpftrain_probe_up{probe}).
struct ProbeDef {
  std::string_view name;
  std::vector<std::string_view> programs;  // must attach for the probe to be up
  std::string_view source;                 // what it attaches to, for --list-probes
  // Why the collector leaves it out unless --enable-probe names it ("" for a probe on by
  // default): its program runs on a path too hot for its worth to every job.
  std::string_view off_by_default = {};
};

// What one u64 of a module's per-slot counter struct means.
struct CounterDef {
  size_t probe = 0;                            // module's probe index; not read while it is down
  const metrics::MetricDef* metric = nullptr;  // nullptr: the word is not exported
  std::string label_name;                      // extra label besides job/rank, "" for none
  std::string label_value;
  // Named series exist from the first poll (0 is information); numeric fallbacks for enum values
  // this kernel does not name appear only if they ever count.
  bool eager = true;
  std::string label2_name = {};  // a second extra label (the RDMA probes' source), "" for none
  std::string label2_value = {};
};

// One counter per value of the kernel enum `kernel_enum` (values 0..values-1), labelled with the
// running kernel's name for it (BTF, `strip_prefix` removed) or, where it has none, its number.
std::vector<CounterDef> enumCounters(size_t probe, const metrics::MetricDef& metric,
                                     const char* label, const char* kernel_enum,
                                     const char* strip_prefix, size_t values);

// Where a module's ring-buffer samples go: the service's targets and series store.
class SampleSink {
 public:
  // Whether a sample of this slot is kept (the slot belongs to a target, or is --all's).
  virtual bool live(uint32_t slot) const = 0;
  // The series of `metric` for the slot's target, with one extra label (or none).
  virtual window::SeriesId series(uint32_t slot, const metrics::MetricDef& metric,
                                  std::string_view label_name, std::string_view label_value) = 0;
  // The same with several extra labels (at most 6).
  virtual window::SeriesId series(uint32_t slot, const metrics::MetricDef& metric,
                                  std::span<const window::Label> extra) = 0;
  // A series of `metric` that belongs to the host, not to a target (an RDMA port's counters),
  // with exactly `labels`.
  virtual window::SeriesId hostSeries(const metrics::MetricDef& metric,
                                      std::span<const window::Label> labels) = 0;
  virtual void record(window::SeriesId id, double value) = 0;
  // The node (host name) the slot's target announced in its hello; empty when unknown (--pid,
  // --cgroup, --all).
  virtual std::string_view node(uint32_t slot) const = 0;

 protected:
  ~SampleSink() = default;
};

// Series ids of N metrics per slot, looked up on a slot's first sample, forgotten on release.
template <size_t N>
class SlotSeries {
 public:
  static constexpr window::SeriesId kUnset = window::kRejectedSeries - 1;
  std::array<window::SeriesId, N>& operator[](uint32_t slot) { return ids_[slot]; }
  bool known(uint32_t slot) const { return ids_[slot][0] != kUnset; }
  void forget(uint32_t slot) { ids_[slot].fill(kUnset); }

 private:
  std::vector<std::array<window::SeriesId, N>> ids_ =
      std::vector<std::array<window::SeriesId, N>>(BPFTRAIN_MAX_SLOTS, [] {
        std::array<window::SeriesId, N> unset;
        unset.fill(kUnset);
        return unset;
      }());
};

// What a module gets to open its object with.
struct ProbeEnv {
  const ProbeOptions& options;
  int ncpus;
  const TgidSlotTable& target_tgids;  // shared into every object
  const HashMap<uint64_t, uint32_t>& target_cgroups;
};

// Probes a module knows to be down before anything attaches (a tracepoint this kernel lacks, a
// kernel feature not configured), with why. The first reason given for a probe is kept.
struct LoadNotes {
  std::vector<std::pair<size_t, std::string>> down;
  void markDown(size_t probe, std::string reason) { down.emplace_back(probe, std::move(reason)); }
};

// The generated skeleton functions of one BPF stem; BPFTRAIN_SKELETON(stem) names them all from the
// stem, so that a module cannot pair one stem's open with another's load.
template <typename Skel>
struct SkeletonOps {
  std::string_view stem;
  Skel* (*open)();
  int (*load)(Skel*);
  void (*destroy)(Skel*);
};
#define BPFTRAIN_SKELETON(stem)                                                    \
  (::bpftrain::collector::loader::SkeletonOps<stem##_bpf>{#stem, stem##_bpf__open, \
                                                          stem##_bpf__load, stem##_bpf__destroy})

// One loaded object. Modules with nothing special use it as it is; PMU and USDT override attach,
// and modules with a ring buffer derive from RingProbeObject.
class ProbeObject {
 public:
  virtual ~ProbeObject() = default;
  bpf_object* object() const { return object_; }

  // Attaches the module's probe `probe` (definition `def`). By default each program in
  // def.programs is attached where its section says (bpf_program__attach).
  virtual Status attach(size_t probe, const ProbeDef& def);
  // Links for one target process (USDT probes live in the process's binary); by default none.
  virtual Status attachTarget(uint32_t tgid, std::vector<LinkPtr>& links);
  // The process `tgid` left slot `slot`, which stays (a discovered rank's worker exited); a
  // released slot is releaseSlot's. By default nothing.
  virtual void detachTarget(uint32_t slot, uint32_t tgid);
  // Drains the ring buffer into the sink; by default there is none.
  virtual Status consume(SampleSink& sink);
  // A slot was released: forget what was cached for it (series ids).
  virtual void releaseSlot(uint32_t slot);

  const PerCpuCounters& counters() const { return counters_; }
  const std::vector<CounterDef>& counterDefs() const { return counter_defs_; }
  const PerCpuArray<uint64_t>& lost() const { return lost_; }
  size_t lostProbe() const { return lost_probe_; }

  // ---- for modules, while loading

  // Opens a skeleton with what every object shares: the targeting rodata (--all, --cgroup), the
  // loader's target maps, and tp_btf programs whose tracepoint this kernel lacks left out (their
  // probes are noted down with why). The caller sets its own rodata, then calls loadSkeleton.
  template <typename Skel>
  Status openSkeleton(Skel*& skel, const SkeletonOps<Skel>& ops, std::span<const ProbeDef> defs,
                      const ProbeEnv& env, LoadNotes& notes) {
    BPFTRAIN_TRY(check("cannot open BPF object " + std::string(ops.stem), skel, ops.open));
    skeleton_ =
        SkeletonPtr(skel, [destroy = ops.destroy](void* p) { destroy(static_cast<Skel*>(p)); });
    object_ = skel->obj;
    skel->rodata->target_all = env.options.all_processes;
    skel->rodata->target_by_cgroup = !env.options.cgroups.empty();
    return prepare(skel->maps.target_tgid_slots, skel->maps.target_cgroups, defs, env, notes);
  }
  template <typename Skel>
  Status loadSkeleton(Skel* skel, const SkeletonOps<Skel>& ops) {
    return check("BPF object " + std::string(ops.stem) + " failed to load",
                 [&] { return ops.load(skel); });
  }
  // What most modules' load is: openSkeleton, `rodata(skel)` (the module's own configuration),
  // loadSkeleton, then setCounters<Counts> on the object's `counts` map. `skel` stays usable for
  // what follows (setLost, a ring buffer).
  template <typename Counts, typename Skel, typename Rodata>
  Status openAndLoad(Skel*& skel, const SkeletonOps<Skel>& ops, std::span<const ProbeDef> defs,
                     const ProbeEnv& env, LoadNotes& notes, std::vector<CounterDef> counters,
                     Rodata&& rodata) {
    BPFTRAIN_TRY(openSkeleton(skel, ops, defs, env, notes));
    rodata(skel);
    BPFTRAIN_TRY(loadSkeleton(skel, ops));
    return setCounters<Counts>(skel->maps.counts, env, std::move(counters));
  }
  template <typename Counts, typename Skel>
  Status openAndLoad(Skel*& skel, const SkeletonOps<Skel>& ops, std::span<const ProbeDef> defs,
                     const ProbeEnv& env, LoadNotes& notes, std::vector<CounterDef> counters) {
    return openAndLoad<Counts>(skel, ops, defs, env, notes, std::move(counters), [](Skel*) {});
  }
  // The per-slot counter block and what its words mean (words past `defs` are not exported).
  template <typename Counts>
  Status setCounters(const bpf_map* map, const ProbeEnv& env, std::vector<CounterDef> defs) {
    auto bound = PerCpuCounters::bind<Counts>(map, env.ncpus);
    if (!bound.ok()) return bound.status();
    counters_ = bound.take();
    if (defs.size() > counters_.words())
      return Status::error("more counter meanings than words in " +
                           std::string(bpf_map__name(map)));
    defs.resize(counters_.words());
    counter_defs_ = std::move(defs);
    return {};
  }
  // The object's `lost` map (events it could not record), counted for the module's `probe`.
  Status setLost(const bpf_map* map, const ProbeEnv& env, size_t probe);
  void addLink(bpf_link* link) { links_.emplace_back(link); }

 private:
  Status prepare(bpf_map* target_tgids, bpf_map* target_cgroups, std::span<const ProbeDef> defs,
                 const ProbeEnv& env, LoadNotes& notes);

  // Declared first, destroyed last: links and derived classes' ring buffers go before it.
  SkeletonPtr skeleton_;
  bpf_object* object_ = nullptr;
  PerCpuCounters counters_;
  std::vector<CounterDef> counter_defs_;
  PerCpuArray<uint64_t> lost_;
  size_t lost_probe_ = 0;
  std::vector<LinkPtr> links_;
};

// The whole load of most modules: a new Object, then its openAndLoad with the module's counter
// meanings and, optionally, its rodata(skel).
template <typename Counts, typename Object = ProbeObject, typename Skel, typename... Rodata>
Result<std::unique_ptr<ProbeObject>> loadObject(const SkeletonOps<Skel>& ops,
                                                std::span<const ProbeDef> defs, const ProbeEnv& env,
                                                LoadNotes& notes, std::vector<CounterDef> counters,
                                                Rodata&&... rodata) {
  auto obj = std::make_unique<Object>();
  Skel* skel = nullptr;
  BPFTRAIN_TRY(obj->template openAndLoad<Counts>(skel, ops, defs, env, notes, std::move(counters),
                                                 std::forward<Rodata>(rodata)...));
  return obj;
}

// A module with two forms of its programs (rdma_rxe: fentry, else kprobes; rdma_verbs: a
// sleepable completion program, else a non-faulting one): `load(true)` builds the preferred form
// unless `why_not_preferred` already says why not (a kernel without what it needs, or an option
// that asks for the other); when the kernel refuses it, `why_not_preferred` says so, with
// libbpf's reason, and `load(false)` builds the other. The module logs which form it runs, with
// that reason.
template <typename Load>
Result<std::unique_ptr<ProbeObject>> loadPreferredElseFallback(std::string& why_not_preferred,
                                                               Load&& load) {
  if (why_not_preferred.empty()) {
    auto loaded = load(true);
    if (loaded.ok()) return loaded;
    why_not_preferred = "the kernel refused it: " + loaded.status().message();
  }
  return load(false);
}

// An object with a ring buffer of `Sample` records (each carrying its slot) that become up to
// `kSeries` series per slot: the module derives from it and writes only onSample, which reads
// sink() and series_ (the slot's ids, looked up on its first sample and forgotten on release).
// Its stem names the ring `samples` and the map of what it could not record `lost`.
template <typename Sample, size_t kSeries>
class RingProbeObject : public ProbeObject {
 public:
  // The ring's handler: one call per record, while consume() runs.
  virtual void onSample(const Sample& sample) = 0;

  // ProbeObject::openAndLoad with the ring sized (ProbeOptions::ring_bytes), then the stem's `lost`
  // map (counted for the module's first probe) and its `samples` ring buffer. Hides the base's, so
  // that loadObject<Counts, Object> binds both.
  template <typename Counts, typename Skel, typename... Rodata>
  Status openAndLoad(Skel*& skel, const SkeletonOps<Skel>& ops, std::span<const ProbeDef> defs,
                     const ProbeEnv& env, LoadNotes& notes, std::vector<CounterDef> counters,
                     Rodata&&... rodata) {
    BPFTRAIN_TRY(openSkeleton(skel, ops, defs, env, notes));
    (rodata(skel), ...);
    if (env.options.ring_bytes)
      BPFTRAIN_TRY(check("cannot size ring buffer of " + std::string(ops.stem), [&] {
        return bpf_map__set_max_entries(skel->maps.samples, env.options.ring_bytes);
      }));
    BPFTRAIN_TRY(loadSkeleton(skel, ops));
    BPFTRAIN_TRY(setCounters<Counts>(skel->maps.counts, env, std::move(counters)));
    BPFTRAIN_TRY(setLost(skel->maps.lost, env, 0));
    auto ring = RingReader<Sample>::open(skel->maps.samples, this);
    if (!ring.ok()) return ring.status();
    ring_ = ring.take();
    return {};
  }

  Status consume(SampleSink& sink) final {
    sink_ = &sink;
    Status status = ring_.consume();
    onStep();
    sink_ = nullptr;
    return status;
  }

  void releaseSlot(uint32_t slot) final {
    series_.forget(slot);
    forgetSlot(slot);
  }
  // For modules that keep more per-slot state than series_ (e.g. tcp's per-link series).
  virtual void forgetSlot(uint32_t) {}
  // Once per step after the ring is drained, with sink() set (e.g. rdma_verbs' pending targets).
  virtual void onStep() {}

 protected:
  SampleSink& sink() { return *sink_; }
  SlotSeries<kSeries> series_;

 private:
  RingReader<Sample> ring_;
  SampleSink* sink_ = nullptr;  // set while consuming
};

// A module: its probes, in --list-probes order (indices are the module's own), and its load,
// which opens, configures and loads the object. An error from load puts every probe of the
// module down with its message (those in notes keep their own reason). Defined with
// BPFTRAIN_PROBE_MODULE.
class ProbeModule {
 public:
  using Load = Result<std::unique_ptr<ProbeObject>> (*)(const ProbeEnv& env, LoadNotes& notes);
  ProbeModule(std::span<const ProbeDef> probes, Load load) : probes_(probes), load_(load) {}

  std::span<const ProbeDef> probes() const { return probes_; }
  Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) const {
    return load_(env, notes);
  }

 private:
  std::span<const ProbeDef> probes_;
  Load load_;
};

// Registers a module: defines probes::<module>::module(), which the generated registry lists.
// Write it once in the module's namespace, after its probe table and load function.
#define BPFTRAIN_PROBE_MODULE(probes, load)                                            \
  const ::bpftrain::collector::loader::ProbeModule& module() {                         \
    static const ::bpftrain::collector::loader::ProbeModule kModule((probes), (load)); \
    return kModule;                                                                    \
  }

// Every module, in --list-probes order (generated from BPFTRAIN_PROBE_MODULES).
std::span<const ProbeModule* const> probeModules();

}  // namespace bpftrain::collector::loader
