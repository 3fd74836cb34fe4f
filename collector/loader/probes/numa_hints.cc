// numa_hints: cross-node memory accesses without a PMU, from NUMA balancing's hinting faults, by
// two mechanisms that are up or down on their own:
//  - numa_hint_faults: a kprobe on task_numa_fault (bpf/numa_hints.bpf.c) counts each hinting fault
//    of a target as local or remote. Down where the kernel has no kprobes (6.18 here), no
//    traceable task_numa_fault, or NUMA balancing off.
//  - numa_fault_locality: the kernel's own decaying per-task, per-node fault statistics
//    (/proc/PID/task/TID/sched, numa_faults lines), read each step for every thread of a target:
//    the share of the rank's recent faults on memory of the node its threads run on. Needs no
//    BPF attach; down where NUMA balancing is off or the file lacks the statistics.
#include "collector/loader/probes/numa_hints.h"

#include <charconv>
#include <cstdio>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>

#include "bpf/numa_hints.h"
#include "collector/loader/probe_module.h"
#include "collector/loader/proc_threads.h"
#include "numa_hints.skel.h"

namespace bpftrain::collector::loader::probes::numa_hints {
namespace {

constexpr size_t kHintFaults = 0, kLocality = 1;

const ProbeDef kProbes[] = {
    {"numa_hint_faults", {"on_task_numa_fault"}, "kprobe task_numa_fault"},
    {"numa_fault_locality", {}, "/proc/PID/task/TID/sched numa_faults (NUMA balancing's own)"},
};

bool readFile(const std::string& path, std::string& out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream text;
  text << in.rdbuf();
  out = text.str();
  return true;
}

// The value of `key=` in `line`, up to the next space or comma.
std::optional<uint64_t> field(std::string_view line, std::string_view key) {
  for (size_t at = line.find(key); at != std::string_view::npos; at = line.find(key, at + 1)) {
    if (at > 0 && line[at - 1] != ' ') continue;  // "task_private=" must not match "private="
    const char* first = line.data() + at + key.size();
    uint64_t value = 0;
    if (auto [end, ec] = std::from_chars(first, line.data() + line.size(), value);
        ec == std::errc())
      return value;
    return std::nullopt;
  }
  return std::nullopt;
}

// Why NUMA balancing gives nothing to count here, or "" when it runs.
std::string balancingOff() {
  std::string text;
  if (!readFile("/proc/sys/kernel/numa_balancing", text))
    return "this kernel has no NUMA balancing (no /proc/sys/kernel/numa_balancing), so there are "
           "no hinting faults";
  if (text.empty() || text[0] == '0')
    return "NUMA balancing is off (kernel.numa_balancing = 0; the kernel keeps it off on a "
           "one-node machine): no hinting faults happen; sysctl kernel.numa_balancing=1 on a "
           "multi-node machine";
  return {};
}

// Why the kprobe on task_numa_fault cannot attach here, or "" when it can.
std::string kprobeUnavailable() {
  std::string text;
  if (!readFile("/sys/bus/event_source/devices/kprobe/type", text) &&
      !readFile("/sys/kernel/tracing/kprobe_events", text))
    return "this kernel has no kprobes (no /sys/bus/event_source/devices/kprobe, no "
           "/sys/kernel/tracing/kprobe_events) and no tracepoint for a NUMA hinting fault; "
           "numa_fault_locality gives the kernel's per-task statistics, and NUMA-misplaced pages "
           "are counted in " +
           metrics::promName(metrics::kPageMigrations) + "{reason=\"numa_misplaced\"}";
  // Where tracefs is mounted it says whether the function can be probed at all (not inlined,
  // not blacklisted); without tracefs the attach itself will say.
  std::ifstream functions("/sys/kernel/tracing/available_filter_functions");
  if (!functions) return {};
  for (std::string line; std::getline(functions, line);)
    if (line.rfind("task_numa_fault", 0) == 0 && (line.size() == 15 || line[15] == ' ')) return {};
  return "task_numa_fault is not traceable in this kernel (not in "
         "/sys/kernel/tracing/available_filter_functions)";
}

class Object final : public ProbeObject {
 public:
  explicit Object(const TgidSlotTable& target_tgids) : target_tgids_(target_tgids) {}

  Status attach(size_t probe, const ProbeDef& def) override {
    if (probe == kLocality) return {};  // nothing to attach: read from /proc each step
    return ProbeObject::attach(probe, def);
  }

  // The service has just put `tgid` in the target table; its value is the slot.
  Status attachTarget(uint32_t tgid, std::vector<LinkPtr>&) override {
    if (const uint32_t slot = target_tgids_.slotOf(tgid)) tgids_[slot].insert(tgid);
    return {};
  }

  Status consume(SampleSink& sink) override {
    if (!locality_up_) return {};
    for (auto& [slot, tgids] : tgids_) {
      if (!sink.live(slot)) continue;
      ThreadNumaFaults sum;
      for (uint32_t tgid : tgids) addProcess(tgid, sum);
      if (sum.total == 0) continue;  // no recent faults: no information, no sample
      auto [it, created] = ids_.try_emplace(slot, window::kRejectedSeries);
      if (created) it->second = sink.series(slot, metrics::kNumaFaultLocality, {}, {});
      sink.record(it->second, static_cast<double>(sum.local) / static_cast<double>(sum.total));
    }
    return {};
  }

  void releaseSlot(uint32_t slot) override {
    tgids_.erase(slot);
    ids_.erase(slot);
  }

  void setLocalityUp(bool up) { locality_up_ = up; }

 private:
  void addProcess(uint32_t tgid, ThreadNumaFaults& sum) {
    // A process gone reads nothing: its slot is released when its sender goes.
    const std::string task_dir = "/proc/" + std::to_string(tgid) + "/task";
    forEachThreadFile(AT_FDCWD, task_dir.c_str(), "sched", text_,
                      [&](uint32_t, const std::string& text) {
                        if (auto faults = parseSchedNumaFaults(text)) {
                          sum.local += faults->local;
                          sum.total += faults->total;
                        }
                      });
  }

  const TgidSlotTable& target_tgids_;
  bool locality_up_ = false;
  std::map<uint32_t, std::set<uint32_t>> tgids_;  // slot -> its processes
  std::map<uint32_t, window::SeriesId> ids_;      // slot -> its gauge
  std::string text_;                              // reused for every sched file
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  const std::string off = balancingOff();
  std::string no_kprobe = kprobeUnavailable();
  if (no_kprobe.empty()) no_kprobe = off;
  std::string no_locality = off;
  if (no_locality.empty()) {
    std::string text;
    if (!readFile("/proc/self/sched", text) || !parseSchedNumaFaults(text))
      no_locality =
          "/proc/PID/sched has no NUMA-balancing statistics in this kernel "
          "(CONFIG_SCHED_DEBUG off)";
  }
  auto object = std::make_unique<Object>(env.target_tgids);
  numa_hints_bpf* skel = nullptr;
  BPFTRAIN_TRY(object->openSkeleton(skel, BPFTRAIN_SKELETON(numa_hints), kProbes, env, notes));
  if (!no_kprobe.empty()) {
    // Loaded without its program: the object still carries the counters the service reads.
    bpf_program__set_autoload(skel->progs.on_task_numa_fault, false);
    notes.markDown(kHintFaults, no_kprobe);
  }
  if (!no_locality.empty()) notes.markDown(kLocality, no_locality);
  object->setLocalityUp(no_locality.empty());
  BPFTRAIN_TRY(object->loadSkeleton(skel, BPFTRAIN_SKELETON(numa_hints)));
  BPFTRAIN_TRY(object->setCounters<numa_hint_counts>(
      skel->maps.counts, env,
      {{kHintFaults, &metrics::kNumaHintFaults, "locality", "local"},
       {kHintFaults, &metrics::kNumaHintFaults, "locality", "remote"}}));
  return std::unique_ptr<ProbeObject>(std::move(object));
}

}  // namespace

std::optional<ThreadNumaFaults> parseSchedNumaFaults(std::string_view text) {
  std::optional<uint64_t> current;
  struct NodeFaults {
    uint64_t node, faults;
  };
  std::vector<NodeFaults> nodes;
  while (!text.empty()) {
    const size_t eol = text.find('\n');
    const std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 1);
    if (line.rfind("current_node=", 0) == 0) {
      current = field(line, "current_node=");
    } else if (line.rfind("numa_faults ", 0) == 0) {
      const auto node = field(line, "node="), priv = field(line, "task_private="),
                 shared = field(line, "task_shared=");
      if (node && priv && shared) nodes.push_back({*node, *priv + *shared});
    }
  }
  if (!current || nodes.empty()) return std::nullopt;
  ThreadNumaFaults out;
  for (const auto& n : nodes) {
    out.total += n.faults;
    if (n.node == *current) out.local += n.faults;
  }
  return out;
}

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::numa_hints
