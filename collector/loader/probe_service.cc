// The BPF loader: opens each object's skeleton, shares one target map across them, attaches each
// probe on its own (a failure is a status, not an error), and every window step folds per-CPU
// counter deltas, ring-buffer samples, loss counts and bpf_stats into the series store.
#include "collector/loader/probe_service.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/perf_event.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>

#include "bpf/faults.h"
#include "bpf/lib/targets.h"
#include "bpf/migrations.h"
#include "bpf/numa_moves.h"
#include "bpf/page_migrations.h"
#include "bpf/pmu.h"
#include "bpf/tcp.h"
#include "bpf/tlb.h"
#include "bpf/usdt_qp.h"
#include "collector/loader/bpf_handles.h"
#include "collector/loader/host_facts.h"
#include "faults.skel.h"
#include "migrations.skel.h"
#include "numa_moves.skel.h"
#include "page_migrations.skel.h"
#include "pmu.skel.h"
#include "tcp.skel.h"
#include "tlb.skel.h"
#include "usdt_qp.skel.h"

namespace bpftrain::collector::loader {
namespace {

using window::Label;
using window::SeriesId;
using window::SeriesKind;
using window::SeriesStore;

constexpr SeriesId kUnset = window::kRejectedSeries - 1;

// libbpf's own messages (verifier logs, "failed to find USDT notes", ...) are kept, not printed:
// the last warning becomes part of a probe's reason. BPFTRAIN_LIBBPF_DEBUG=1 prints them all.
std::mutex g_libbpf_mutex;
std::string g_libbpf_last;

int libbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  static const bool verbose = std::getenv("BPFTRAIN_LIBBPF_DEBUG") != nullptr;
  if (verbose) {
    va_list copy;
    va_copy(copy, args);
    std::vfprintf(stderr, format, copy);
    va_end(copy);
  }
  if (level == LIBBPF_DEBUG) return 0;
  char line[512];
  std::vsnprintf(line, sizeof(line), format, args);
  std::lock_guard lock(g_libbpf_mutex);
  g_libbpf_last = line;
  while (!g_libbpf_last.empty() && g_libbpf_last.back() == '\n') g_libbpf_last.pop_back();
  return 0;
}

std::string takeLibbpfMessage() {
  std::lock_guard lock(g_libbpf_mutex);
  return std::exchange(g_libbpf_last, {});
}

std::string errnoText(int err) { return std::strerror(err < 0 ? -err : err); }

// One probe as the user sees it (--list-probes, bpftrain_probe_up{probe}).
struct ProbeDef {
  const char* name;
  const char* stem;                   // BPF object; nullptr: no program can serve it here
  std::vector<const char*> programs;  // programs that must attach for the probe to be up
  const char* source;                 // for --list-probes
};

const std::vector<ProbeDef>& probeDefs() {
  static const std::vector<ProbeDef> defs = {
      {"migrations", "migrations", {"on_migrate_task"}, "tp_btf sched:sched_migrate_task"},
      {"numa_moves",
       "numa_moves",
       {"on_move_numa", "on_swap_numa", "on_stick_numa"},
       "tracepoints sched:sched_{move,swap,stick}_numa"},
      {"page_migrations",
       "page_migrations",
       {"on_migrate_pages"},
       "tracepoint migrate:mm_migrate_pages"},
      {"tlb_flush", "tlb", {"on_tlb_flush"}, "tp_btf tlb:tlb_flush"},
      {"page_faults", "faults", {"on_page_fault_user"}, "tp_btf exceptions:page_fault_user"},
      {"thp_faults", "faults", {"on_page_alloc"}, "tp_btf kmem:mm_page_alloc (PMD order)"},
      {"dtlb_misses", "pmu", {"on_dtlb_miss"}, "PMU PERF_TYPE_HW_CACHE dTLB read miss"},
      {"itlb_misses", "pmu", {"on_itlb_miss"}, "PMU PERF_TYPE_HW_CACHE iTLB read miss"},
      {"node_load_misses", "pmu", {"on_node_load_miss"}, "PMU PERF_TYPE_HW_CACHE node read miss"},
      {"node_loads", "pmu", {"on_node_load"}, "PMU PERF_TYPE_HW_CACHE node read access"},
      {"numa_hint_faults", nullptr, {}, "NUMA hinting-fault tracepoint (none in mainline)"},
      {"tcp",
       "tcp",
       {"on_tcp_sendmsg", "on_tcp_probe", "on_tcp_retransmit", "on_tcp_destroy"},
       "tp_btf tcp:tcp_sendmsg_locked, tcp:tcp_probe, tcp:tcp_retransmit_skb"},
      {"rdma_usdt",
       "usdt_qp",
       {"on_qp_post", "on_qp_complete"},
       "USDT bpftrain:qp_post / bpftrain:qp_complete (per target process)"},
  };
  return defs;
}

// What one u64 of an object's per-slot counter struct means.
struct CounterDef {
  int probe = -1;  // index into probes_; not read while that probe is down
  std::string metric;
  std::string label_name;  // extra label besides job/rank, "" for none
  std::string label_value;
  // Named series exist from the first poll (0 is information); numeric fallbacks for enum
  // values this kernel does not name appear only if they ever count.
  bool eager = true;
};

struct Probe {
  const ProbeDef* def = nullptr;
  bool up = false;
  std::string reason;
  std::vector<bpf_program*> programs;
  uint64_t prev_run_ns = 0, prev_run_cnt = 0;
  uint64_t prev_lost = 0;
  SeriesId up_id = kUnset, run_seconds_id = kUnset, events_id = kUnset, lost_id = kUnset;
};

struct LoadedObject {
  std::string stem;
  SkeletonPtr skeleton;
  bpf_object* object = nullptr;
  std::string error;  // load failure; every probe of the object is down with it
  std::vector<LinkPtr> links;
  // Per-slot counters.
  int counts_fd = -1;
  size_t counters_per_slot = 0;
  std::vector<CounterDef> counters;
  std::vector<uint64_t> prev;  // [slot * counters_per_slot + i]
  std::vector<SeriesId> ids;
  // Event loss (full ring buffer / map), attributed to one probe.
  int lost_fd = -1;
  int lost_probe = -1;
  RingBufferPtr ring;
};

struct Slot {
  bool used = false;
  std::string key;  // identity: "s<sender>:<pid>", "p<pid>", "c<path>"
  std::string job, rank;
  std::vector<uint32_t> tgids;
  uint64_t cgroup_id = 0;
  std::map<uint32_t, std::vector<LinkPtr>> usdt_links;  // per tgid
};

struct WantedTarget {
  std::string job, rank;
  std::vector<uint32_t> tgids;
  uint64_t cgroup_id = 0;
};

class ProbeServiceImpl final : public ProbeService {
 public:
  ProbeServiceImpl(const ProbeOptions& options, SeriesStore* store, int writer)
      : options_(options), store_(store), writer_(writer) {}

  ~ProbeServiceImpl() override {
    // Links before objects, objects before the shared maps: unique_ptr members do it in
    // reverse declaration order, slots (USDT links) explicitly first.
    for (auto& slot : slots_) slot.usdt_links.clear();
  }

  void init();
  void poll(const ingest::SenderRegistry& registry, int64_t now_ns) override;
  std::vector<ProbeStatus> status() const override;

 private:
  template <typename Skel>
  void setCommonRodata(Skel* skel) {
    skel->rodata->target_all = options_.all_processes;
    skel->rodata->target_by_cgroup = !options_.cgroups.empty();
  }
  template <typename Skel, typename Configure>
  void loadObject(const char* stem, Skel* (*open)(), int (*load)(Skel*), void (*destroy)(Skel*),
                  Configure configure);
  void defineCounters(LoadedObject& obj);
  void attachProbes();
  void attachPmu(Probe& probe, LoadedObject& obj, uint32_t cache_id, uint32_t result);
  LoadedObject* object(const std::string& stem);
  int probeIndex(const std::string& name) const;
  void markDown(Probe& probe, std::string reason);

  void syncTargets(const std::vector<ingest::Sender>& senders);
  void releaseSlot(size_t index);
  void publishTargets();
  void assignSlot(size_t index, const std::string& key, const WantedTarget& target);
  void attachUsdt(Slot& slot, uint32_t tgid);
  void readCounters(LoadedObject& obj, int64_t now_ns);
  void readLossAndStats(int64_t now_ns);
  SeriesId slotSeries(size_t slot, const std::string& metric, const std::string& extra_name,
                      const std::string& extra_value, SeriesKind kind);
  SeriesId probeSeries(const char* metric, const char* probe, SeriesKind kind);
  void record(SeriesId id, double value, int64_t now_ns) {
    if (id != window::kRejectedSeries && id != kUnset) store_->record(writer_, id, value, now_ns);
  }
  static int onTcpSample(void* ctx, void* data, size_t size);
  static int onQpSample(void* ctx, void* data, size_t size);

  ProbeOptions options_;
  SeriesStore* store_;  // null for listProbes()
  int writer_;
  int ncpus_ = 0;
  UniqueFd tgid_map_, cgroup_map_, stats_fd_;
  std::vector<std::unique_ptr<LoadedObject>> objects_;
  std::vector<Probe> probes_;
  std::vector<Slot> slots_ = std::vector<Slot>(BPFTRAIN_MAX_SLOTS);
  bool synced_once_ = false;
  uint64_t registry_version_ = 0;
  int64_t poll_now_ns_ = 0;
  std::vector<std::array<SeriesId, 3>> tcp_ids_ =
      std::vector<std::array<SeriesId, 3>>(BPFTRAIN_MAX_SLOTS, {kUnset, kUnset, kUnset});
  std::vector<SeriesId> rdma_depth_ids_ = std::vector<SeriesId>(BPFTRAIN_MAX_SLOTS, kUnset);
  std::vector<uint64_t> percpu_buffer_;
  uint64_t targets_dropped_ = 0, targets_dropped_reported_ = 0;  // slots or map entries full
  SeriesId targets_dropped_id_ = kUnset;
  uint32_t generation_ = 1;  // the objects' initial targets_generation
};

LoadedObject* ProbeServiceImpl::object(const std::string& stem) {
  for (auto& obj : objects_)
    if (obj->stem == stem) return obj.get();
  return nullptr;
}

int ProbeServiceImpl::probeIndex(const std::string& name) const {
  for (size_t i = 0; i < probes_.size(); ++i)
    if (name == probes_[i].def->name) return static_cast<int>(i);
  return -1;
}

void ProbeServiceImpl::markDown(Probe& probe, std::string reason) {
  if (!probe.up && !probe.reason.empty()) return;  // keep the first reason
  probe.up = false;
  probe.reason = std::move(reason);
}

template <typename Skel, typename Configure>
void ProbeServiceImpl::loadObject(const char* stem, Skel* (*open)(), int (*load)(Skel*),
                                  void (*destroy)(Skel*), Configure configure) {
  auto obj = std::make_unique<LoadedObject>();
  obj->stem = stem;
  Skel* skel = open();
  if (!skel) {
    obj->error = "cannot open BPF object " + std::string(stem) + ": " + errnoText(errno);
    objects_.push_back(std::move(obj));
    return;
  }
  obj->skeleton = SkeletonPtr(skel, [destroy](void* p) { destroy(static_cast<Skel*>(p)); });
  obj->object = skel->obj;
  setCommonRodata(skel);
  configure(skel);
  // Share the loader's target maps: one write per target change serves every object.
  bpf_map__reuse_fd(skel->maps.target_tgids, tgid_map_.get());
  bpf_map__reuse_fd(skel->maps.target_cgroups, cgroup_map_.get());
  // A tp_btf program whose tracepoint this kernel lacks would fail the whole object: skip it and
  // let its probe report why.
  bpf_program* prog;
  bpf_object__for_each_program(prog, skel->obj) {
    const std::string section = bpf_program__section_name(prog);
    if (section.rfind("tp_btf/", 0) == 0 && !kernelHasRawTracepoint(section.substr(7))) {
      bpf_program__set_autoload(prog, false);
      for (auto& probe : probes_)
        for (const char* name : probe.def->programs)
          if (name == std::string(bpf_program__name(prog)))
            markDown(probe, "tracepoint " + section.substr(7) + " does not exist in this kernel");
    }
  }
  takeLibbpfMessage();
  if (int err = load(skel); err != 0) {
    std::string detail = takeLibbpfMessage();
    obj->error = "BPF object " + std::string(stem) + " failed to load: " + errnoText(err) +
                 (detail.empty() ? "" : " (" + detail + ")");
  }
  objects_.push_back(std::move(obj));
}

void ProbeServiceImpl::init() {
  libbpf_set_print(libbpfPrint);
  ncpus_ = libbpf_num_possible_cpus();
  for (const auto& def : probeDefs()) {
    Probe probe;
    probe.def = &def;
    probes_.push_back(std::move(probe));
  }
  // Run-time statistics for bpftrain_probe_run_seconds_total: held by an fd, so they switch off
  // again (kernel.bpf_stats_enabled restored) when the collector exits, even on a crash.
  if (options_.bpf_stats) {
    int fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
    if (fd >= 0)
      stats_fd_ = UniqueFd(fd);
    else
      std::fprintf(stderr, "bpftrain: bpf_stats not enabled (%s): probe run time not exported\n",
                   errnoText(errno).c_str());
  }
  tgid_map_ = UniqueFd(bpf_map_create(BPF_MAP_TYPE_HASH, "bt_tgids", sizeof(uint32_t),
                                      sizeof(uint32_t), BPFTRAIN_MAX_TARGET_PIDS, nullptr));
  cgroup_map_ = UniqueFd(bpf_map_create(BPF_MAP_TYPE_HASH, "bt_cgroups", sizeof(uint64_t),
                                        sizeof(uint32_t), BPFTRAIN_MAX_TARGET_CGROUPS, nullptr));
  if (!tgid_map_.valid() || !cgroup_map_.valid()) {
    const std::string why = "cannot create the target maps: " + errnoText(errno);
    for (auto& probe : probes_) markDown(probe, why);
    return;
  }

  const CpuTopology topo = readCpuTopology(ncpus_);
  loadObject<migrations_bpf>("migrations", migrations_bpf__open, migrations_bpf__load,
                             migrations_bpf__destroy, [&](migrations_bpf* s) {
                               for (size_t c = 0; c < topo.llc.size() && c < BPFTRAIN_MAX_CPUS;
                                    ++c) {
                                 s->rodata->cpu_llc[c] = topo.llc[c];
                                 s->rodata->cpu_node[c] = topo.node[c];
                               }
                             });
  loadObject<numa_moves_bpf>("numa_moves", numa_moves_bpf__open, numa_moves_bpf__load,
                             numa_moves_bpf__destroy, [](numa_moves_bpf*) {});
  loadObject<page_migrations_bpf>("page_migrations", page_migrations_bpf__open,
                                  page_migrations_bpf__load, page_migrations_bpf__destroy,
                                  [](page_migrations_bpf*) {});
  loadObject<tlb_bpf>("tlb", tlb_bpf__open, tlb_bpf__load, tlb_bpf__destroy, [](tlb_bpf*) {});
  const uint32_t thp_order = thpOrder();
  loadObject<faults_bpf>(
      "faults", faults_bpf__open, faults_bpf__load, faults_bpf__destroy,
      [&](faults_bpf* s) { s->rodata->thp_order = thp_order ? thp_order : 255; });
  loadObject<pmu_bpf>("pmu", pmu_bpf__open, pmu_bpf__load, pmu_bpf__destroy, [](pmu_bpf*) {});
  loadObject<tcp_bpf>("tcp", tcp_bpf__open, tcp_bpf__load, tcp_bpf__destroy, [&](tcp_bpf* s) {
    s->rodata->sample_interval_ns = options_.tcp_sample_interval_ns;
  });
  loadObject<usdt_qp_bpf>("usdt_qp", usdt_qp_bpf__open, usdt_qp_bpf__load, usdt_qp_bpf__destroy,
                          [](usdt_qp_bpf*) {});
  if (thp_order == 0)
    markDown(probes_[probeIndex("thp_faults")],
             "transparent huge pages are not configured in this kernel");

  for (auto& obj : objects_) defineCounters(*obj);
  attachProbes();
  // The caller logs status() (one line per probe that is down), as the collector does.
}

void ProbeServiceImpl::defineCounters(LoadedObject& obj) {
  if (!obj.error.empty()) return;
  bpf_map* counts = bpf_object__find_map_by_name(obj.object, "counts");
  if (!counts) return;
  obj.counts_fd = bpf_map__fd(counts);
  obj.counters_per_slot = bpf_map__value_size(counts) / sizeof(uint64_t);
  auto add = [&](const char* probe, const char* metric, const char* label, std::string value) {
    const bool eager = value.empty() || !std::isdigit(static_cast<unsigned char>(value[0]));
    obj.counters.push_back({probeIndex(probe), metric, label, std::move(value), eager});
  };
  auto addEnum = [&](const char* probe, const char* metric, const char* label,
                     const std::vector<std::string>& names, size_t n) {
    for (size_t i = 0; i < n; ++i)
      add(probe, metric, label,
          i < names.size() && !names[i].empty() ? names[i] : std::to_string(i));
  };
  if (obj.stem == "migrations") {
    for (const char* scope : {"cpu", "llc", "node"})
      add("migrations", "bpftrain_migrations", "scope", scope);
  } else if (obj.stem == "numa_moves") {
    for (const char* kind : {"move", "swap", "stick"})
      add("numa_moves", "bpftrain_numa_task_moves", "kind", kind);
  } else if (obj.stem == "page_migrations") {
    addEnum("page_migrations", "bpftrain_page_migrations", "reason",
            kernelEnumNames("migrate_reason", "MR_", PAGE_MIGRATION_REASONS),
            PAGE_MIGRATION_REASONS);
  } else if (obj.stem == "tlb") {
    addEnum("tlb_flush", "bpftrain_tlb_flushes", "reason",
            kernelEnumNames("tlb_flush_reason", "TLB_", TLB_FLUSH_REASONS), TLB_FLUSH_REASONS);
  } else if (obj.stem == "faults") {
    add("page_faults", "bpftrain_page_faults", "", "");
    add("thp_faults", "bpftrain_thp_faults", "", "");
  } else if (obj.stem == "pmu") {
    add("dtlb_misses", "bpftrain_dtlb_misses", "", "");
    add("itlb_misses", "bpftrain_itlb_misses", "", "");
    add("node_load_misses", "bpftrain_node_load_misses", "", "");
    add("node_loads", "bpftrain_node_loads", "", "");
  } else if (obj.stem == "tcp") {
    add("tcp", "bpftrain_transport_retransmits", "transport", "tcp");
    add("tcp", "bpftrain_transport_samples", "transport", "tcp");
  } else if (obj.stem == "usdt_qp") {
    add("rdma_usdt", "bpftrain_rdma_qp_events", "event", "post");
    add("rdma_usdt", "bpftrain_rdma_qp_events", "event", "complete");
  }
  obj.counters.resize(obj.counters_per_slot);  // the struct is the contract; never read past it
  obj.prev.assign(BPFTRAIN_MAX_SLOTS * obj.counters_per_slot, 0);
  obj.ids.assign(BPFTRAIN_MAX_SLOTS * obj.counters_per_slot, kUnset);
  if (bpf_map* lost = bpf_object__find_map_by_name(obj.object, "lost")) {
    obj.lost_fd = bpf_map__fd(lost);
    obj.lost_probe = probeIndex(obj.stem == "tcp" ? "tcp" : "rdma_usdt");
  }
  if (bpf_map* samples = bpf_object__find_map_by_name(obj.object, "samples")) {
    auto callback =
        obj.stem == "tcp" ? &ProbeServiceImpl::onTcpSample : &ProbeServiceImpl::onQpSample;
    obj.ring.reset(ring_buffer__new(bpf_map__fd(samples), callback, this, nullptr));
  }
}

void ProbeServiceImpl::attachPmu(Probe& probe, LoadedObject& obj, uint32_t cache_id,
                                 uint32_t result) {
  perf_event_attr attr{};
  attr.type = PERF_TYPE_HW_CACHE;
  attr.size = sizeof(attr);
  attr.config = cache_id | (PERF_COUNT_HW_CACHE_OP_READ << 8) | (result << 16);
  attr.sample_period = options_.pmu_sample_period;
  attr.disabled = 0;
  bpf_program* prog = bpf_object__find_program_by_name(obj.object, probe.def->programs[0]);
  for (int cpu = 0; cpu < ncpus_; ++cpu) {
    int fd =
        static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC));
    if (fd < 0) {
      if (errno == ENODEV && cpu > 0) continue;  // offline CPU
      const int err = errno;
      markDown(probe, std::string(err == ENOENT || err == EOPNOTSUPP || err == EINVAL
                                      ? "no hardware PMU for this event on this machine"
                                      : "cannot open the PMU event") +
                          " (perf_event_open PERF_TYPE_HW_CACHE: " + errnoText(err) + ")");
      return;
    }
    UniqueFd owned(fd);
    bpf_link* link = bpf_program__attach_perf_event(prog, fd);
    if (!link) {
      markDown(probe, "cannot attach to the PMU event: " + errnoText(errno));
      return;
    }
    owned.release();  // the perf link closes the event fd when it is destroyed
    obj.links.emplace_back(link);
  }
  probe.programs.push_back(prog);
}

void ProbeServiceImpl::attachProbes() {
  for (auto& probe : probes_) {
    const ProbeDef& def = *probe.def;
    if (!def.stem) {
      // Mainline kernels (6.18 included) have no tracepoint for a NUMA hinting fault, and the
      // kprobe/fentry that could count one are unavailable: say so, and where to look instead.
      markDown(probe,
               "no NUMA hinting-fault tracepoint in this kernel and kprobes/fentry are "
               "unavailable; NUMA-misplaced pages are counted in "
               "bpftrain_page_migrations_total{reason=\"numa_misplaced\"}");
      continue;
    }
    if (!probe.reason.empty()) continue;  // already known to be down (missing tracepoint)
    LoadedObject* obj = object(def.stem);
    if (!obj || !obj->error.empty()) {
      markDown(probe, obj ? obj->error : "BPF object missing");
      continue;
    }
    if (def.stem == std::string("pmu")) {
      const std::string name = def.name;
      if (name == "dtlb_misses")
        attachPmu(probe, *obj, PERF_COUNT_HW_CACHE_DTLB, PERF_COUNT_HW_CACHE_RESULT_MISS);
      if (name == "itlb_misses")
        attachPmu(probe, *obj, PERF_COUNT_HW_CACHE_ITLB, PERF_COUNT_HW_CACHE_RESULT_MISS);
      if (name == "node_load_misses")
        attachPmu(probe, *obj, PERF_COUNT_HW_CACHE_NODE, PERF_COUNT_HW_CACHE_RESULT_MISS);
      if (name == "node_loads")
        attachPmu(probe, *obj, PERF_COUNT_HW_CACHE_NODE, PERF_COUNT_HW_CACHE_RESULT_ACCESS);
      if (probe.reason.empty()) probe.up = true;
      continue;
    }
    bool ok = true;
    for (const char* name : def.programs) {
      bpf_program* prog = bpf_object__find_program_by_name(obj->object, name);
      if (!prog) {
        markDown(probe, std::string("program ") + name + " missing from the object");
        ok = false;
        break;
      }
      probe.programs.push_back(prog);
      if (def.stem == std::string("usdt_qp")) continue;  // attached per target process
      takeLibbpfMessage();
      bpf_link* link = bpf_program__attach(prog);
      if (!link) {
        const int err = errno;
        std::string detail = takeLibbpfMessage();
        markDown(probe, std::string("cannot attach ") + bpf_program__section_name(prog) + ": " +
                            errnoText(err) + (detail.empty() ? "" : " (" + detail + ")"));
        ok = false;
        break;
      }
      obj->links.emplace_back(link);
    }
    probe.up = ok;
    if (ok) probe.reason.clear();
  }
}

// ---- targets

void ProbeServiceImpl::syncTargets(const std::vector<ingest::Sender>& senders) {
  std::map<std::string, WantedTarget> wanted;
  for (const auto& s : senders) {
    if (s.pid <= 0) continue;
    wanted["s" + std::to_string(s.sender_id) + ":" + std::to_string(s.pid)] =
        WantedTarget{s.job, std::to_string(s.rank), {static_cast<uint32_t>(s.pid)}, 0};
  }
  for (size_t i = 0; i < options_.pids.size(); ++i) {
    if (options_.pids[i] <= 0) continue;
    // A --pid that is also a registered rank keeps the rank's labels.
    bool known = false;
    for (const auto& s : senders) known |= s.pid == options_.pids[i];
    if (!known)
      wanted["p" + std::to_string(options_.pids[i])] =
          WantedTarget{"manual", std::to_string(i), {static_cast<uint32_t>(options_.pids[i])}, 0};
  }
  for (size_t i = 0; i < options_.cgroups.size(); ++i) {
    struct stat st {};
    if (::stat(options_.cgroups[i].c_str(), &st) != 0) continue;  // reported once at create()
    wanted["c" + options_.cgroups[i]] = WantedTarget{"cgroup", std::to_string(i), {}, st.st_ino};
  }
  // Release what is gone, then give new targets the lowest free slots (slot 0 is --all's).
  std::set<std::string> present;
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (!slots_[i].used) continue;
    if (!wanted.count(slots_[i].key))
      releaseSlot(i);
    else
      present.insert(slots_[i].key);
  }
  size_t next = 1;
  for (const auto& [key, target] : wanted) {
    if (present.count(key)) continue;
    while (next < slots_.size() && slots_[next].used) ++next;
    if (next >= slots_.size()) {
      ++targets_dropped_;
      std::fprintf(stderr, "bpftrain: more than %d BPF targets: %s not traced\n",
                   BPFTRAIN_MAX_SLOTS - 1, key.c_str());
      continue;
    }
    assignSlot(next, key, target);
  }
  publishTargets();
}

void ProbeServiceImpl::publishTargets() {
  // Every object memoizes tgid -> slot per CPU; a new generation makes them look again.
  ++generation_;
  for (auto& obj : objects_) {
    if (!obj->error.empty()) continue;
    bpf_map* map = bpf_object__find_map_by_name(obj->object, ".data.targets");
    if (!map) continue;
    uint32_t key = 0;
    bpf_map_update_elem(bpf_map__fd(map), &key, &generation_, BPF_ANY);
  }
}

void ProbeServiceImpl::releaseSlot(size_t index) {
  Slot& slot = slots_[index];
  for (uint32_t tgid : slot.tgids) {
    // Several senders can share a process (simulated ranks): only remove our own entry.
    uint32_t owner = 0;
    if (bpf_map_lookup_elem(tgid_map_.get(), &tgid, &owner) == 0 && owner == index)
      bpf_map_delete_elem(tgid_map_.get(), &tgid);
  }
  if (slot.cgroup_id) bpf_map_delete_elem(cgroup_map_.get(), &slot.cgroup_id);
  slot.usdt_links.clear();
  // Zero the slot's counters so its next owner starts from nothing.
  for (auto& obj : objects_) {
    if (obj->counts_fd < 0) continue;
    std::vector<uint64_t> zeros(static_cast<size_t>(ncpus_) * obj->counters_per_slot, 0);
    uint32_t key = static_cast<uint32_t>(index);
    bpf_map_update_elem(obj->counts_fd, &key, zeros.data(), BPF_ANY);
    for (size_t i = 0; i < obj->counters_per_slot; ++i) {
      obj->prev[index * obj->counters_per_slot + i] = 0;
      obj->ids[index * obj->counters_per_slot + i] = kUnset;
    }
  }
  tcp_ids_[index] = {kUnset, kUnset, kUnset};
  rdma_depth_ids_[index] = kUnset;
  slot = Slot{};
}

void ProbeServiceImpl::assignSlot(size_t index, const std::string& key,
                                  const WantedTarget& target) {
  Slot& slot = slots_[index];
  slot.used = true;
  slot.key = key;
  slot.job = target.job;
  slot.rank = target.rank;
  slot.tgids = target.tgids;
  slot.cgroup_id = target.cgroup_id;
  const uint32_t value = static_cast<uint32_t>(index);
  for (uint32_t tgid : slot.tgids) {
    // A process announced by several senders counts under the first of them.
    if (bpf_map_update_elem(tgid_map_.get(), &tgid, &value, BPF_NOEXIST) != 0 && errno != EEXIST) {
      ++targets_dropped_;
      std::fprintf(stderr, "bpftrain: target map full: pid %u not traced\n", tgid);
    }
    attachUsdt(slot, tgid);
  }
  if (slot.cgroup_id) bpf_map_update_elem(cgroup_map_.get(), &slot.cgroup_id, &value, BPF_ANY);
}

void ProbeServiceImpl::attachUsdt(Slot& slot, uint32_t tgid) {
  const int index = probeIndex("rdma_usdt");
  if (index < 0 || !probes_[index].up) return;
  const std::string exe = "/proc/" + std::to_string(tgid) + "/exe";
  std::error_code ec;
  const std::string path = std::filesystem::read_symlink(exe, ec).string();
  if (ec) return;  // gone already
  std::vector<LinkPtr> links;
  for (bpf_program* prog : probes_[index].programs) {
    const char* name =
        std::strcmp(bpf_program__name(prog), "on_qp_post") == 0 ? "qp_post" : "qp_complete";
    bpf_link* link = bpf_program__attach_usdt(prog, static_cast<pid_t>(tgid), path.c_str(),
                                              "bpftrain", name, nullptr);
    // A process whose binary has no bpftrain USDT notes (no RDMA transport) is not an error.
    if (link) links.emplace_back(link);
  }
  takeLibbpfMessage();
  if (!links.empty()) slot.usdt_links[tgid] = std::move(links);
}

// ---- reading

SeriesId ProbeServiceImpl::slotSeries(size_t slot, const std::string& metric,
                                      const std::string& extra_name, const std::string& extra_value,
                                      SeriesKind kind) {
  const bool all = slot == BPFTRAIN_SLOT_ALL;
  Label labels[3] = {{"job", all ? "all" : slots_[slot].job},
                     {"rank", all ? "all" : slots_[slot].rank},
                     {extra_name, extra_value}};
  return store_->lookup(metric, std::span<const Label>(labels, extra_name.empty() ? 2 : 3), kind);
}

SeriesId ProbeServiceImpl::probeSeries(const char* metric, const char* probe, SeriesKind kind) {
  Label label{"probe", probe};
  return store_->lookup(metric, std::span<const Label>(&label, 1), kind);
}

void ProbeServiceImpl::readCounters(LoadedObject& obj, int64_t now_ns) {
  if (obj.counts_fd < 0 || obj.counters_per_slot == 0) return;
  const size_t n = obj.counters_per_slot;
  percpu_buffer_.resize(static_cast<size_t>(ncpus_) * n);
  for (size_t slot = 0; slot < slots_.size(); ++slot) {
    if (!(slots_[slot].used || (slot == BPFTRAIN_SLOT_ALL && options_.all_processes))) continue;
    uint32_t key = static_cast<uint32_t>(slot);
    if (bpf_map_lookup_elem(obj.counts_fd, &key, percpu_buffer_.data()) != 0) continue;
    for (size_t i = 0; i < n; ++i) {
      const CounterDef& def = obj.counters[i];
      if (def.metric.empty() || def.probe < 0 || !probes_[def.probe].up) continue;
      uint64_t total = 0;
      for (int cpu = 0; cpu < ncpus_; ++cpu) total += percpu_buffer_[cpu * n + i];
      uint64_t& prev = obj.prev[slot * n + i];
      SeriesId& id = obj.ids[slot * n + i];
      if (id == kUnset && (def.eager || total > prev))
        id = slotSeries(slot, def.metric, def.label_name, def.label_value, SeriesKind::kCounter);
      if (total > prev) record(id, static_cast<double>(total - prev), now_ns);
      prev = total;
    }
  }
}

int ProbeServiceImpl::onTcpSample(void* ctx, void* data, size_t size) {
  auto* self = static_cast<ProbeServiceImpl*>(ctx);
  if (size < sizeof(tcp_sample)) return 0;
  tcp_sample sample;
  std::memcpy(&sample, data, sizeof(sample));
  if (sample.slot >= self->slots_.size()) return 0;
  if (!self->slots_[sample.slot].used && sample.slot != BPFTRAIN_SLOT_ALL) return 0;
  auto& ids = self->tcp_ids_[sample.slot];
  if (ids[0] == kUnset) {
    ids[0] = self->slotSeries(sample.slot, "bpftrain_transport_queue_depth", "transport", "tcp",
                              SeriesKind::kDistribution);
    ids[1] = self->slotSeries(sample.slot, "bpftrain_transport_rtt_seconds", "transport", "tcp",
                              SeriesKind::kDistribution);
    ids[2] = self->slotSeries(sample.slot, "bpftrain_transport_inflight_bytes", "transport", "tcp",
                              SeriesKind::kDistribution);
  }
  // Queue depth is what the application queued and the peer has not acknowledged (SIOCOUTQ).
  // Bytes in flight alone fall when the receiver is slow (its window closes), so they are kept
  // as their own series.
  self->record(ids[0], sample.send_queue, self->poll_now_ns_);
  self->record(ids[1], sample.srtt_us * 1e-6, self->poll_now_ns_);
  self->record(ids[2], sample.bytes_in_flight, self->poll_now_ns_);
  return 0;
}

int ProbeServiceImpl::onQpSample(void* ctx, void* data, size_t size) {
  auto* self = static_cast<ProbeServiceImpl*>(ctx);
  if (size < sizeof(qp_sample)) return 0;
  qp_sample sample;
  std::memcpy(&sample, data, sizeof(sample));
  if (sample.slot >= self->slots_.size()) return 0;
  if (!self->slots_[sample.slot].used && sample.slot != BPFTRAIN_SLOT_ALL) return 0;
  SeriesId& id = self->rdma_depth_ids_[sample.slot];
  if (id == kUnset)
    id = self->slotSeries(sample.slot, "bpftrain_transport_queue_depth", "transport", "rdma",
                          SeriesKind::kDistribution);
  self->record(id, sample.outstanding, self->poll_now_ns_);
  return 0;
}

void ProbeServiceImpl::readLossAndStats(int64_t now_ns) {
  for (auto& obj : objects_) {
    if (obj->lost_fd < 0 || obj->lost_probe < 0) continue;
    percpu_buffer_.resize(static_cast<size_t>(ncpus_));
    uint32_t key = 0;
    if (bpf_map_lookup_elem(obj->lost_fd, &key, percpu_buffer_.data()) != 0) continue;
    uint64_t total = 0;
    for (int cpu = 0; cpu < ncpus_; ++cpu) total += percpu_buffer_[cpu];
    Probe& probe = probes_[obj->lost_probe];
    if (probe.lost_id == kUnset)
      probe.lost_id =
          probeSeries("bpftrain_probe_events_lost", probe.def->name, SeriesKind::kCounter);
    if (total > probe.prev_lost)
      record(probe.lost_id, static_cast<double>(total - probe.prev_lost), now_ns);
    probe.prev_lost = total;
  }
  if (targets_dropped_ > targets_dropped_reported_) {
    if (targets_dropped_id_ == kUnset)
      targets_dropped_id_ =
          store_->lookup("bpftrain_probe_targets_dropped", {}, SeriesKind::kCounter);
    record(targets_dropped_id_, static_cast<double>(targets_dropped_ - targets_dropped_reported_),
           now_ns);
    targets_dropped_reported_ = targets_dropped_;
  }
  for (auto& probe : probes_) {
    if (probe.up_id == kUnset)
      probe.up_id = probeSeries("bpftrain_probe_up", probe.def->name, SeriesKind::kGauge);
    record(probe.up_id, probe.up ? 1.0 : 0.0, now_ns);
    if (!probe.up || !stats_fd_.valid()) continue;
    uint64_t run_ns = 0, run_cnt = 0;
    for (bpf_program* prog : probe.programs) {
      bpf_prog_info info{};
      uint32_t len = sizeof(info);
      if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) != 0) continue;
      run_ns += info.run_time_ns;
      run_cnt += info.run_cnt;
    }
    if (probe.run_seconds_id == kUnset) {
      probe.run_seconds_id =
          probeSeries("bpftrain_probe_run_seconds", probe.def->name, SeriesKind::kCounter);
      probe.events_id = probeSeries("bpftrain_probe_events", probe.def->name, SeriesKind::kCounter);
    }
    if (run_ns > probe.prev_run_ns)
      record(probe.run_seconds_id, (run_ns - probe.prev_run_ns) * 1e-9, now_ns);
    if (run_cnt > probe.prev_run_cnt)
      record(probe.events_id, static_cast<double>(run_cnt - probe.prev_run_cnt), now_ns);
    probe.prev_run_ns = run_ns;
    probe.prev_run_cnt = run_cnt;
  }
}

void ProbeServiceImpl::poll(const ingest::SenderRegistry& registry, int64_t now_ns) {
  if (!store_) return;
  poll_now_ns_ = now_ns;
  const uint64_t version = registry.version();
  if (!synced_once_ || version != registry_version_) {
    syncTargets(registry.snapshot());
    registry_version_ = version;
    synced_once_ = true;
  }
  for (auto& obj : objects_) {
    readCounters(*obj, now_ns);
    if (obj->ring) ring_buffer__consume(obj->ring.get());
  }
  readLossAndStats(now_ns);
}

std::vector<ProbeStatus> ProbeServiceImpl::status() const {
  std::vector<ProbeStatus> out;
  for (const auto& probe : probes_) out.push_back({probe.def->name, probe.up, probe.reason});
  return out;
}

std::string capabilityError() {
  const auto missing = missingBpfCapabilities();
  if (missing.empty()) return {};
  std::string names;
  for (const auto& m : missing) names += (names.empty() ? "" : " and ") + m;
  return "BPF probes need CAP_BPF and CAP_PERFMON (missing " + names +
         "): run as root, or `setcap cap_bpf,cap_perfmon+ep bpftrain-collector`, or pass --no-bpf "
         "to run without probes";
}

}  // namespace

std::unique_ptr<ProbeService> ProbeService::create(const ProbeOptions& options,
                                                   window::SeriesStore& store, int writer_index,
                                                   std::string& error) {
  error = capabilityError();
  if (!error.empty()) return nullptr;
  for (const auto& cgroup : options.cgroups) {
    struct stat st {};
    if (::stat(cgroup.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
      error = "--cgroup " + cgroup + ": not a cgroup v2 directory (e.g. /sys/fs/cgroup/my.slice)";
      return nullptr;
    }
  }
  auto service = std::make_unique<ProbeServiceImpl>(options, &store, writer_index);
  service->init();
  return service;
}

std::vector<ProbeStatus> ProbeService::listProbes() {
  const std::string error = capabilityError();
  if (!error.empty()) {
    std::vector<ProbeStatus> out;
    for (const auto& def : probeDefs()) out.push_back({def.name, false, error});
    return out;
  }
  ProbeOptions options;
  options.bpf_stats = false;
  ProbeServiceImpl probe_set(options, nullptr, 0);
  probe_set.init();
  return probe_set.status();
}

std::string ProbeService::describe(const std::string& probe) {
  for (const auto& def : probeDefs())
    if (probe == def.name) return def.source;
  return {};
}

}  // namespace bpftrain::collector::loader
