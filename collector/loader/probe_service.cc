// The BPF loader's common part: loads every probe module (probe_module.h), shares one pair of
// target maps across their objects, attaches each probe on its own (a failure is a status, not an
// error), follows the registry's targets and every window step folds per-CPU counter deltas,
// ring-buffer samples, loss counts and bpf_stats into the series store. What a probe is and means
// lives in its module (collector/loader/probes/); nothing here knows a probe by name.
#include "collector/loader/probe_service.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sys/stat.h>

#include <cstdio>
#include <map>
#include <set>

#include "bpf/lib/targets.h"
#include "collector/loader/bpf_handles.h"
#include "collector/loader/bpf_maps.h"
#include "collector/loader/host_facts.h"
#include "collector/loader/libbpf_check.h"
#include "collector/loader/probe_module.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::loader {
namespace {

using window::Label;
using window::SeriesId;
using window::SeriesStore;

constexpr SeriesId kUnset = window::kRejectedSeries - 1;

struct RunStats {
  uint64_t run_ns = 0, run_cnt = 0;
};

// bpf_stats of one program (kernel.bpf_stats_enabled): run time and run count since load.
Status addRunStats(const bpf_program* prog, RunStats& sum) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  BPFTRAIN_TRY(check(std::string("reading the run time of ") + bpf_program__name(prog),
                     [&] { return bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len); }));
  sum.run_ns += info.run_time_ns;
  sum.run_cnt += info.run_cnt;
  return {};
}

const ProbeDef* findProbe(std::string_view name) {
  for (const ProbeModule* module : probeModules())
    for (const auto& def : module->probes())
      if (def.name == name) return &def;
  return nullptr;
}

struct Probe {
  const ProbeDef* def = nullptr;
  size_t module = 0;  // index into loaded_
  size_t local = 0;   // the module's own index for it
  bool up = false;
  bool left_out = false;  // --disable-probe, or off by default and not enabled
  std::string reason;
  std::vector<const bpf_program*> programs;  // for bpf_stats
  uint64_t prev_run_ns = 0, prev_run_cnt = 0;
  uint64_t prev_lost = 0;
  SeriesId up_id = kUnset, run_seconds_id = kUnset, runs_id = kUnset, lost_id = kUnset;
};

// One module and what the service keeps about its object.
struct Loaded {
  const ProbeModule* module = nullptr;
  size_t first_probe = 0;
  std::unique_ptr<ProbeObject> object;  // null: the module did not load (its probes say why)
  std::vector<uint64_t> totals;         // [word] this poll
  std::vector<uint64_t> prev;           // [slot * words + word]
  std::vector<SeriesId> ids;            // [slot * words + word]
};

struct Slot {
  bool used = false;
  bool retired = false;  // its old target could not be removed from the maps: never reused
  std::string key;       // identity: "s<sender>:<pid>", "p<pid>", "c<path>", "d<job>\n<rank>"
  std::string job, rank;
  std::string node;  // the host the target said it runs on (hello); empty when not said
  std::vector<uint32_t> tgids;
  uint64_t cgroup_id = 0;
  std::map<uint32_t, std::vector<LinkPtr>> target_links;  // per tgid (USDT)
  // The series this slot looked up: allowed to expire once no slot holds them (the rank left).
  std::vector<SeriesId> series;
};

struct WantedTarget {
  std::string job, rank;
  std::vector<uint32_t> tgids;
  uint64_t cgroup_id = 0;
  std::string node;
};

class ProbeServiceImpl final : public ProbeService, private SampleSink {
 public:
  ProbeServiceImpl(const ProbeOptions& options, SeriesStore* store, int writer)
      : options_(options), store_(store), writer_(writer) {}

  ~ProbeServiceImpl() override {
    // Links before objects, objects before the shared maps: members go in reverse declaration
    // order, the slots' per-target links explicitly first.
    for (auto& slot : slots_) slot.target_links.clear();
  }

  void init();
  void poll(const ingest::SenderRegistry& registry, int64_t now_ns) override;
  void drainRings(int64_t now_ns) override;
  void setDiscovered(std::vector<discovery::DiscoveredRank> ranks) override {
    discovered_ = std::move(ranks);
    discovered_changed_ = true;
  }
  std::vector<ProbeStatus> status() const override;
  void useRunStatsSwitch(std::unique_ptr<RunStatsSwitch> stats_switch) override;

 private:
  void markDown(Probe& probe, std::string reason);
  // A probe that was up fails while running: down with the reason, and one log line.
  void fail(Probe& probe, const Status& status);
  void failModule(Loaded& loaded, const Status& status);
  bool anyUp(const Loaded& loaded) const;
  void loadModules(const ProbeEnv& env);
  void attachProbes();

  void syncTargets(const std::vector<ingest::Sender>& senders);
  void releaseSlot(size_t index);
  void assignSlot(size_t index, const std::string& key, const WantedTarget& target);
  void addTgid(size_t index, uint32_t tgid);
  void removeTgid(size_t index, uint32_t tgid);
  void retarget(size_t index, const WantedTarget& target);
  void dropTarget(const std::string& what, const Status& status);

  void readCounters(Loaded& loaded, int64_t now_ns);
  void readLossAndStats(int64_t now_ns);
  SeriesId probeSeries(const metrics::MetricDef& metric, std::string_view probe);
  void record(SeriesId id, double value, int64_t now_ns) {
    if (id != window::kRejectedSeries && id != kUnset) store_->record(writer_, id, value, now_ns);
  }

  // SampleSink: what modules' ring-buffer handlers record into.
  bool live(uint32_t slot) const override {
    return slot < slots_.size() && (slots_[slot].used || slot == BPFTRAIN_SLOT_ALL);
  }
  SeriesId series(uint32_t slot, const metrics::MetricDef& metric, std::string_view label_name,
                  std::string_view label_value) override;
  SeriesId series(uint32_t slot, const metrics::MetricDef& metric,
                  std::span<const Label> extra) override;
  std::string_view node(uint32_t slot) const override {
    return slot < slots_.size() && slot != BPFTRAIN_SLOT_ALL ? std::string_view(slots_[slot].node)
                                                             : std::string_view();
  }
  SeriesId hostSeries(const metrics::MetricDef& metric, std::span<const Label> labels) override {
    return window::lookupMetric(*store_, metric, labels);
  }
  void record(SeriesId id, double value) override { record(id, value, poll_now_ns_); }

  ProbeOptions options_;
  SeriesStore* store_;  // null for listProbes()
  int writer_;
  int ncpus_ = 0;
  std::unique_ptr<RunStatsSampler> run_stats_;
  SeriesId run_stats_ratio_id_ = kUnset;
  TgidSlotTable target_tgids_;
  HashMap<uint64_t, uint32_t> target_cgroups_;
  std::vector<Loaded> loaded_;
  std::vector<Probe> probes_;
  std::vector<Slot> slots_ = std::vector<Slot>(BPFTRAIN_MAX_SLOTS);
  bool synced_once_ = false;
  uint64_t registry_version_ = 0;
  std::vector<discovery::DiscoveredRank> discovered_;
  bool discovered_changed_ = false;
  int64_t poll_now_ns_ = 0;
  std::vector<uint64_t> percpu_buffer_;
  std::map<SeriesId, uint32_t> holders_;  // how many slots hold each series (Slot::series)
  std::set<std::string> untraced_;        // targets left out at the last sync (slots full)
  int64_t untraced_logged_ns_ = 0;
  uint64_t targets_dropped_ = 0, targets_dropped_reported_ = 0;
  SeriesId targets_dropped_id_ = kUnset;
};

void ProbeServiceImpl::markDown(Probe& probe, std::string reason) {
  if (!probe.up && !probe.reason.empty()) return;  // keep the first reason
  probe.up = false;
  probe.reason = std::move(reason);
}

void ProbeServiceImpl::fail(Probe& probe, const Status& status) {
  if (!probe.up) return;
  std::fprintf(stderr, "bpftrain: probe %s down: %s (%s)\n", std::string(probe.def->name).c_str(),
               status.message().c_str(), status.where().c_str());
  markDown(probe, status.message());
}

void ProbeServiceImpl::failModule(Loaded& loaded, const Status& status) {
  for (size_t i = 0; i < loaded.module->probes().size(); ++i)
    fail(probes_[loaded.first_probe + i], status);
}

bool ProbeServiceImpl::anyUp(const Loaded& loaded) const {
  for (size_t i = 0; i < loaded.module->probes().size(); ++i)
    if (probes_[loaded.first_probe + i].up) return true;
  return false;
}

void ProbeServiceImpl::init() {
  captureLibbpfMessages();
  for (const ProbeModule* module : probeModules()) {
    Loaded loaded;
    loaded.module = module;
    loaded.first_probe = probes_.size();
    for (size_t i = 0; i < module->probes().size(); ++i) {
      Probe probe;
      probe.def = &module->probes()[i];
      probe.module = loaded_.size();
      probe.local = i;
      probes_.push_back(std::move(probe));
    }
    loaded_.push_back(std::move(loaded));
  }
  const Status cpus = check("cannot count the possible CPUs", [&] {
    ncpus_ = libbpf_num_possible_cpus();
    return ncpus_;
  });
  if (!cpus.ok()) {
    for (auto& probe : probes_) markDown(probe, cpus.message());
    return;
  }
  // Run-time statistics for bpftrain_probe_run_seconds_total (run_stats_sampler.h): held by an
  // fd, so they switch off again when the collector exits, even on a crash.
  run_stats_ = std::make_unique<RunStatsSampler>(options_.run_stats, ownRunStatsSwitch());
  auto tgids = TgidSlotTable::create();
  auto cgroups = HashMap<uint64_t, uint32_t>::create("bt_cgroups", BPFTRAIN_MAX_TARGET_CGROUPS);
  for (const Status* failed : {&tgids.status(), &cgroups.status()})
    if (!failed->ok()) {
      for (auto& probe : probes_) markDown(probe, failed->message());
      return;
    }
  target_tgids_ = tgids.take();
  target_cgroups_ = cgroups.take();
  loadModules(ProbeEnv{options_, ncpus_, target_tgids_, target_cgroups_});
  attachProbes();
  // The caller logs status() (one line per probe that is down), as the collector does.
}

void ProbeServiceImpl::loadModules(const ProbeEnv& env) {
  for (auto& loaded : loaded_) {
    LoadNotes notes;
    auto result = loaded.module->load(env, notes);
    for (auto& [probe, reason] : notes.down)
      markDown(probes_[loaded.first_probe + probe], std::move(reason));
    Status status = result.ok() ? Status{} : result.status();
    if (result.ok()) {
      loaded.object = result.take();
      const size_t words = loaded.object->counters().words();
      loaded.totals.assign(words, 0);
      loaded.prev.assign(BPFTRAIN_MAX_SLOTS * words, 0);
      loaded.ids.assign(BPFTRAIN_MAX_SLOTS * words, kUnset);
    }
    if (!status.ok()) {
      loaded.object.reset();
      for (size_t i = 0; i < loaded.module->probes().size(); ++i)
        markDown(probes_[loaded.first_probe + i], status.message());
    }
  }
}

void ProbeServiceImpl::attachProbes() {
  for (auto& probe : probes_) {
    const std::string name(probe.def->name);
    probe.left_out = options_.disabled.count(name) ||
                     (!probe.def->off_by_default.empty() && !options_.enabled.count(name));
    if (options_.disabled.count(name))
      markDown(probe, "disabled (--disable-probe " + name + ")");
    else if (probe.left_out)
      markDown(probe, "off by default, --enable-probe " + name + " attaches it (" +
                          std::string(probe.def->off_by_default) + ")");
    if (!probe.reason.empty()) continue;  // known to be down already
    ProbeObject* object = loaded_[probe.module].object.get();
    if (!object) {
      markDown(probe, "BPF object missing");
      continue;
    }
    if (const Status status = object->attach(probe.local, *probe.def); !status.ok()) {
      markDown(probe, status.message());
      continue;
    }
    // Programs left out of the load (faults' page-fault program without --cgroup or --all) have
    // no run time to read.
    for (std::string_view name : probe.def->programs)
      if (const bpf_program* prog =
              bpf_object__find_program_by_name(object->object(), std::string(name).c_str());
          prog && bpf_program__fd(prog) >= 0)
        probe.programs.push_back(prog);
    probe.up = true;
    probe.reason.clear();
  }
}

// ---- targets

void ProbeServiceImpl::syncTargets(const std::vector<ingest::Sender>& senders) {
  std::map<std::string, WantedTarget> wanted;
  // One slot per process: the kernel counts by tgid, so a process announced by several senders
  // (simulated ranks, one loadgen with 50 workers) counts under its lowest sender id; slots of the
  // others would only hold zeros, and 50 of them per short job used up the slots.
  std::map<pid_t, const ingest::Sender*> by_pid;
  for (const auto& s : senders) {
    if (s.pid <= 0) continue;
    auto [it, fresh] = by_pid.emplace(s.pid, &s);
    if (!fresh && s.sender_id < it->second->sender_id) it->second = &s;
  }
  for (const auto& [pid, s] : by_pid)
    wanted["s" + std::to_string(s->sender_id) + ":" + std::to_string(pid)] =
        WantedTarget{s->job, std::to_string(s->rank), {static_cast<uint32_t>(pid)}, 0, s->node};
  for (size_t i = 0; i < options_.pids.size(); ++i) {
    if (options_.pids[i] <= 0) continue;
    // A --pid that is also a registered rank keeps the rank's labels.
    bool known = false;
    for (const auto& s : senders) known |= s.pid == options_.pids[i];
    if (!known)
      wanted["p" + std::to_string(options_.pids[i])] = WantedTarget{
          "manual", std::to_string(i), {static_cast<uint32_t>(options_.pids[i])}, 0, {}};
  }
  for (const auto& rank : discovered_) {
    // A discovered process that also says hello (bpftrain-train under torchrun) is the sender's.
    WantedTarget target{rank.job, rank.rank, {}, 0, {}};
    for (pid_t pid : rank.pids) {
      bool known = false;
      for (const auto& s : senders) known |= s.pid == pid;
      if (!known && pid > 0) target.tgids.push_back(static_cast<uint32_t>(pid));
    }
    if (!target.tgids.empty()) wanted["d" + rank.job + "\n" + rank.rank] = std::move(target);
  }
  for (size_t i = 0; i < options_.cgroups.size(); ++i) {
    struct stat st {};
    if (::stat(options_.cgroups[i].c_str(), &st) != 0) continue;  // reported once at create()
    wanted["c" + options_.cgroups[i]] =
        WantedTarget{"cgroup", std::to_string(i), {}, st.st_ino, {}};
  }
  // Release what is gone, then give new targets the lowest free slots (slot 0 is --all's).
  std::set<std::string> present;
  for (size_t i = 1; i < slots_.size(); ++i) {
    if (!slots_[i].used) continue;
    auto it = wanted.find(slots_[i].key);
    if (it == wanted.end()) {
      releaseSlot(i);
      continue;
    }
    present.insert(slots_[i].key);
    // A discovered rank gains and loses processes (data loader workers) under the same slot.
    if (it->second.tgids != slots_[i].tgids) retarget(i, it->second);
  }
  size_t next = 1;
  std::set<std::string> untraced;
  size_t newly_untraced = 0;
  for (const auto& [key, target] : wanted) {
    if (present.count(key)) continue;
    while (next < slots_.size() && (slots_[next].used || slots_[next].retired)) ++next;
    if (next >= slots_.size()) {
      // Counted once per target, not once per sync: a target left out stays wanted (and is
      // looked at again) on every registry change until a slot frees up or it leaves.
      untraced.insert(key);
      if (!untraced_.count(key)) ++newly_untraced;
      continue;
    }
    assignSlot(next, key, target);
  }
  untraced_ = std::move(untraced);
  if (newly_untraced > 0) {
    targets_dropped_ += newly_untraced;
    // At most one line a minute: jobs coming and going past the slot limit would otherwise write
    // a line per target, and a collector whose stderr is not drained fast blocks on it.
    if (untraced_logged_ns_ == 0 || poll_now_ns_ - untraced_logged_ns_ >= 60'000'000'000) {
      std::fprintf(stderr,
                   "bpftrain: more than %d BPF targets: %zu not traced (%s among them; "
                   "bpftrain_probe_targets_dropped_total counts each, this line repeats at most "
                   "once a minute)\n",
                   BPFTRAIN_MAX_SLOTS - 1, untraced_.size(), untraced_.begin()->c_str());
      untraced_logged_ns_ = poll_now_ns_;
    }
  }
}

void ProbeServiceImpl::dropTarget(const std::string& what, const Status& status) {
  ++targets_dropped_;
  std::fprintf(stderr, "bpftrain: %s: %s (%s)\n", what.c_str(), status.message().c_str(),
               status.where().c_str());
}

void ProbeServiceImpl::releaseSlot(size_t index) {
  Slot& slot = slots_[index];
  const uint32_t slot_key = static_cast<uint32_t>(index);
  bool clean = true;  // nothing of the old target is left in the maps
  for (uint32_t tgid : slot.tgids) {
    // Several senders can share a process (simulated ranks): only our own entry goes.
    if (Status status = target_tgids_.erase(tgid, slot_key); !status.ok()) {
      dropTarget("pid " + std::to_string(tgid) + " may still count as " + slot.key, status);
      clean = false;
    }
  }
  if (slot.cgroup_id)
    if (Status status = target_cgroups_.erase(slot.cgroup_id);
        !status.ok() && status.err() != ENOENT) {
      dropTarget("cgroup of " + slot.key + " may still count", status);
      clean = false;
    }
  slot.target_links.clear();
  for (SeriesId id : slot.series)
    if (auto it = holders_.find(id); it != holders_.end() && --it->second == 0) {
      holders_.erase(it);
      store_->setExpires(id, true);
    }
  // Zero the slot's counters so that its next owner starts from nothing.
  for (auto& loaded : loaded_) {
    if (!loaded.object) continue;
    const PerCpuCounters& counters = loaded.object->counters();
    if (counters.bound())
      if (Status status = counters.zero(slot_key); !status.ok()) {
        dropTarget("counters of " + slot.key + " not cleared", status);
        clean = false;
      }
    const size_t words = counters.words();
    for (size_t i = 0; i < words; ++i) {
      loaded.prev[index * words + i] = 0;
      loaded.ids[index * words + i] = kUnset;
    }
    loaded.object->releaseSlot(slot_key);
  }
  slot = Slot{};
  // A slot that still has an old target's entries would give the next owner its counts.
  slot.retired = !clean;
}

void ProbeServiceImpl::assignSlot(size_t index, const std::string& key,
                                  const WantedTarget& target) {
  Slot& slot = slots_[index];
  slot.used = true;
  slot.key = key;
  slot.job = target.job;
  slot.rank = target.rank;
  slot.node = target.node;
  slot.tgids = target.tgids;
  slot.cgroup_id = target.cgroup_id;
  const uint32_t value = static_cast<uint32_t>(index);
  for (uint32_t tgid : slot.tgids) addTgid(index, tgid);
  if (slot.cgroup_id)
    if (Status status = target_cgroups_.insert(slot.cgroup_id, value, /*only_new=*/false);
        !status.ok())
      dropTarget("cgroup " + key.substr(1) + " not traced", status);
}

void ProbeServiceImpl::addTgid(size_t index, uint32_t tgid) {
  Slot& slot = slots_[index];
  // A process announced by several senders counts under the first of them.
  if (Status status = target_tgids_.insert(tgid, static_cast<uint32_t>(index), /*only_new=*/true);
      !status.ok() && status.err() != EEXIST) {
    dropTarget("pid " + std::to_string(tgid) + " not traced", status);
    return;
  }
  for (auto& loaded : loaded_) {
    if (!loaded.object || !anyUp(loaded)) continue;
    std::vector<LinkPtr> links;
    if (Status status = loaded.object->attachTarget(tgid, links); !status.ok())
      dropTarget("pid " + std::to_string(tgid) + " not traced by every probe", status);
    for (auto& link : links) slot.target_links[tgid].push_back(std::move(link));
  }
}

void ProbeServiceImpl::removeTgid(size_t index, uint32_t tgid) {
  Slot& slot = slots_[index];
  if (Status status = target_tgids_.erase(tgid, static_cast<uint32_t>(index)); !status.ok())
    dropTarget("pid " + std::to_string(tgid) + " may still count as " + slot.key, status);
  slot.target_links.erase(tgid);
  for (auto& loaded : loaded_)
    if (loaded.object) loaded.object->detachTarget(static_cast<uint32_t>(index), tgid);
}

// The slot's processes change, its counters and series stay: what a leaving process counted
// remains the rank's, and a process joining counts from now on.
void ProbeServiceImpl::retarget(size_t index, const WantedTarget& target) {
  Slot& slot = slots_[index];
  for (uint32_t tgid : slot.tgids)
    if (std::find(target.tgids.begin(), target.tgids.end(), tgid) == target.tgids.end())
      removeTgid(index, tgid);
  for (uint32_t tgid : target.tgids)
    if (std::find(slot.tgids.begin(), slot.tgids.end(), tgid) == slot.tgids.end())
      addTgid(index, tgid);
  slot.tgids = target.tgids;
}

// ---- reading

SeriesId ProbeServiceImpl::series(uint32_t slot, const metrics::MetricDef& metric,
                                  std::string_view label_name, std::string_view label_value) {
  const Label extra{label_name, label_value};
  return series(slot, metric, std::span<const Label>(&extra, label_name.empty() ? 0 : 1));
}

SeriesId ProbeServiceImpl::series(uint32_t slot, const metrics::MetricDef& metric,
                                  std::span<const Label> extra) {
  // string_views of the slot's own strings: `all ? "all" : job` would view a temporary copy.
  const bool all = slot == BPFTRAIN_SLOT_ALL;
  const std::string_view job = all ? std::string_view("all") : slots_[slot].job;
  const std::string_view rank = all ? std::string_view("all") : slots_[slot].rank;
  constexpr size_t kMaxExtra = 6;
  if (extra.size() > kMaxExtra) return window::kRejectedSeries;
  Label labels[2 + kMaxExtra] = {{"job", job}, {"rank", rank}};
  std::copy(extra.begin(), extra.end(), labels + 2);
  const SeriesId id =
      window::lookupMetric(*store_, metric, std::span<const Label>(labels, 2 + extra.size()));
  if (!all && id != window::kRejectedSeries) {
    // Kept while a slot caches the id, free to expire (--series-ttl) once the last slot holding
    // it is released: ranks of jobs that ended leave the store; a rank that exited and came back
    // (a torchrun restart) finds its series again if it returns within the TTL.
    std::vector<SeriesId>& held = slots_[slot].series;
    if (std::find(held.begin(), held.end(), id) == held.end()) {
      held.push_back(id);
      if (holders_[id]++ == 0) store_->setExpires(id, false);
    }
  }
  return id;
}

SeriesId ProbeServiceImpl::probeSeries(const metrics::MetricDef& metric, std::string_view probe) {
  Label label{"probe", probe};
  return window::lookupMetric(*store_, metric, std::span<const Label>(&label, 1));
}

void ProbeServiceImpl::readCounters(Loaded& loaded, int64_t now_ns) {
  const PerCpuCounters& counters = loaded.object->counters();
  const std::vector<CounterDef>& defs = loaded.object->counterDefs();
  if (!counters.bound() || !anyUp(loaded)) return;
  const size_t n = counters.words();
  for (size_t slot = 0; slot < slots_.size(); ++slot) {
    if (!(slots_[slot].used || (slot == BPFTRAIN_SLOT_ALL && options_.all_processes))) continue;
    if (Status status = counters.sum(static_cast<uint32_t>(slot), loaded.totals, percpu_buffer_);
        !status.ok()) {
      failModule(loaded, status);  // zero counts forever would look like a quiet target
      return;
    }
    for (size_t i = 0; i < n; ++i) {
      const CounterDef& def = defs[i];
      if (!def.metric || !probes_[loaded.first_probe + def.probe].up) continue;
      const uint64_t total = loaded.totals[i];
      uint64_t& prev = loaded.prev[slot * n + i];
      SeriesId& id = loaded.ids[slot * n + i];
      if (id == kUnset && (def.eager || total > prev)) {
        const Label extra[2] = {{def.label_name, def.label_value},
                                {def.label2_name, def.label2_value}};
        const size_t first = def.label_name.empty() ? 1 : 0;
        const size_t count = (def.label_name.empty() ? 0 : 1) + (def.label2_name.empty() ? 0 : 1);
        id = series(static_cast<uint32_t>(slot), *def.metric,
                    std::span<const Label>(extra + first, count));
      }
      if (total > prev) record(id, static_cast<double>(total - prev), now_ns);
      prev = total;
    }
  }
}

void ProbeServiceImpl::readLossAndStats(int64_t now_ns) {
  std::vector<uint64_t> per_cpu;
  for (auto& loaded : loaded_) {
    if (!loaded.object || !loaded.object->lost().bound()) continue;
    Probe& probe = probes_[loaded.first_probe + loaded.object->lostProbe()];
    if (!probe.up) continue;
    if (Status status = loaded.object->lost().read(0, per_cpu); !status.ok()) {
      fail(probe, status);
      continue;
    }
    uint64_t total = 0;
    for (uint64_t v : per_cpu) total += v;
    if (probe.lost_id == kUnset)
      probe.lost_id = probeSeries(metrics::kProbeEventsLost, probe.def->name);
    if (total > probe.prev_lost) {
      record(probe.lost_id, static_cast<double>(total - probe.prev_lost), now_ns);
      if (probe.prev_lost == 0)  // once per probe: the counter says how many from then on
        std::fprintf(stderr,
                     "bpftrain: probe %s lost %llu events (ring buffer or map full); "
                     "bpftrain_probe_events_lost_total{probe=\"%s\"} counts every one\n",
                     std::string(probe.def->name).c_str(),
                     static_cast<unsigned long long>(total - probe.prev_lost),
                     std::string(probe.def->name).c_str());
    }
    probe.prev_lost = total;
  }
  if (targets_dropped_ > targets_dropped_reported_) {
    if (targets_dropped_id_ == kUnset)
      targets_dropped_id_ = window::lookupMetric(*store_, metrics::kProbeTargetsDropped, {});
    record(targets_dropped_id_, static_cast<double>(targets_dropped_ - targets_dropped_reported_),
           now_ns);
    targets_dropped_reported_ = targets_dropped_;
  }
  const RunStatsSampler::Reading reading =
      run_stats_ ? run_stats_->beforeRead(now_ns) : RunStatsSampler::Reading{};
  for (auto& probe : probes_) {
    // A probe left out on purpose (--disable-probe, or off by default) is not down: no
    // probe_up 0 for the ProbeDown alert to fire on.
    if (probe.left_out) continue;
    if (probe.up_id == kUnset) probe.up_id = probeSeries(metrics::kProbeUp, probe.def->name);
    record(probe.up_id, probe.up ? 1.0 : 0.0, now_ns);
    if (!probe.up || !reading.read) continue;
    RunStats stats;
    Status status;
    for (const bpf_program* prog : probe.programs)
      if (status = addRunStats(prog, stats); !status.ok()) break;
    if (!status.ok()) {
      // The probe still counts; only its cost is unknown this step.
      std::fprintf(stderr, "bpftrain: %s: %s\n", std::string(probe.def->name).c_str(),
                   status.message().c_str());
      continue;
    }
    if (probe.run_seconds_id == kUnset) {
      probe.run_seconds_id = probeSeries(metrics::kProbeRunSeconds, probe.def->name);
      probe.runs_id = probeSeries(metrics::kProbeRuns, probe.def->name);
    }
    // A sampled window's runs are scaled to the time it stands for (scale 0: a base only).
    if (stats.run_ns > probe.prev_run_ns && reading.scale > 0)
      record(probe.run_seconds_id, (stats.run_ns - probe.prev_run_ns) * 1e-9 * reading.scale,
             now_ns);
    if (stats.run_cnt > probe.prev_run_cnt && reading.scale > 0)
      record(probe.runs_id, static_cast<double>(stats.run_cnt - probe.prev_run_cnt) * reading.scale,
             now_ns);
    probe.prev_run_ns = stats.run_ns;
    probe.prev_run_cnt = stats.run_cnt;
  }
  if (!run_stats_) return;
  run_stats_->afterRead(now_ns);
  if (run_stats_ratio_id_ == kUnset)
    run_stats_ratio_id_ = window::lookupMetric(*store_, metrics::kProbeRunStatsMeasuredRatio, {});
  record(run_stats_ratio_id_, run_stats_->measuredRatio(), now_ns);
}

void ProbeServiceImpl::poll(const ingest::SenderRegistry& registry, int64_t now_ns) {
  if (!store_) return;
  poll_now_ns_ = now_ns;
  const uint64_t version = registry.version();
  if (!synced_once_ || version != registry_version_ || discovered_changed_) {
    syncTargets(registry.snapshot());
    registry_version_ = version;
    synced_once_ = true;
    discovered_changed_ = false;
  }
  for (auto& loaded : loaded_) {
    if (!loaded.object) continue;
    readCounters(loaded, now_ns);
    if (!anyUp(loaded)) continue;
    if (Status status = loaded.object->consume(*this); !status.ok()) failModule(loaded, status);
  }
  readLossAndStats(now_ns);
}

void ProbeServiceImpl::useRunStatsSwitch(std::unique_ptr<RunStatsSwitch> stats_switch) {
  if (run_stats_) run_stats_->replaceSwitch(std::move(stats_switch));
}

void ProbeServiceImpl::drainRings(int64_t now_ns) {
  if (!store_ || !synced_once_) return;
  poll_now_ns_ = now_ns;
  for (auto& loaded : loaded_) {
    if (!loaded.object || !anyUp(loaded)) continue;
    if (Status status = loaded.object->consume(*this); !status.ok()) failModule(loaded, status);
  }
}

std::vector<ProbeStatus> ProbeServiceImpl::status() const {
  std::vector<ProbeStatus> out;
  for (const auto& probe : probes_)
    out.push_back({std::string(probe.def->name), probe.up, probe.reason, probe.left_out});
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
  // A misspelt --enable-probe / --disable-probe is said, not fatal: the other probes still run.
  for (const auto& [flag, names] : {std::pair{"--enable-probe", &options.enabled},
                                    std::pair{"--disable-probe", &options.disabled}})
    for (const auto& name : *names)
      if (!findProbe(name))
        std::fprintf(stderr, "bpftrain: %s %s: no such probe (--list-probes names them)\n", flag,
                     name.c_str());
  auto service = std::make_unique<ProbeServiceImpl>(options, &store, writer_index);
  service->init();
  return service;
}

std::vector<ProbeStatus> ProbeService::listProbes() {
  const std::string error = capabilityError();
  if (!error.empty()) {
    std::vector<ProbeStatus> out;
    for (const ProbeModule* module : probeModules())
      for (const auto& def : module->probes()) out.push_back({std::string(def.name), false, error});
    return out;
  }
  ProbeOptions options;
  options.run_stats.mode = RunStatsMode::kOff;
  // Whether each could attach here, those off by default included (the listing says which).
  for (const ProbeModule* module : probeModules())
    for (const auto& def : module->probes()) options.enabled.insert(std::string(def.name));
  ProbeServiceImpl probe_set(options, nullptr, 0);
  probe_set.init();
  return probe_set.status();
}

std::string ProbeService::offByDefault(const std::string& probe) {
  const ProbeDef* def = findProbe(probe);
  return def ? std::string(def->off_by_default) : std::string();
}

std::string ProbeService::describe(const std::string& probe) {
  const ProbeDef* def = findProbe(probe);
  return def ? std::string(def->source) : std::string();
}

}  // namespace bpftrain::collector::loader
