// faults: page faults and THP faults (PMD-order page allocations in the target's context).
// A process target's page faults come from /proc/PID/stat (minflt + majflt), read each step for
// the processes the module learned in attachTarget(): a BPF program on every fault cost the fault
// path an extra ~140 ns per fault with bpf_stats (docs/probes.md, "Cheap probes"), the read costs
// the collector a few microseconds per process per step and the faulting process nothing. Only
// --cgroup and --all slots, which have no process list, still count with the page_fault_user
// program, which is loaded only then and skips tgid targets. The PMD order comes from sysfs;
// without THP in the kernel the thp_faults probe is down.
#include "collector/loader/probes/faults.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "bpf/faults.h"
#include "collector/loader/host_facts.h"
#include "collector/loader/probe_module.h"
#include "collector/loader/proc_counter_slots.h"
#include "common/proc_stat.h"
#include "faults.skel.h"

namespace bpftrain::collector::loader::probes::faults {
namespace {

enum : size_t { kPageFaults, kThpFaults };

const ProbeDef kProbes[] = {
    {"page_faults",
     {"on_page_fault_user"},
     "/proc/PID/stat minflt+majflt; tp_btf exceptions:page_fault_user for --cgroup/--all"},
    // Its program runs on every page allocation of the host: tools/bench probes' blocks measured
    // a page-fault storm at 1.066-1.079x CPU with it and 0.995-1.000x without (80 blocks each,
    // load 5-7; docs/probes.md), against a goal of 1.03x for the fault path.
    {"thp_faults",
     {"on_page_alloc"},
     "tp_btf kmem:mm_page_alloc (PMD order)",
     "its program runs on every page allocation of the host (about 6% of a page-fault storm)"},
};

// The process's fault count from its open stat file (pread at 0 makes the kernel write it anew).
// nullopt once the process has been reaped: the open file refers to it, never to a reused pid.
std::optional<uint64_t> readFaults(const UniqueFd& fd) {
  char buf[1024];
  const ssize_t n = ::pread(fd.get(), buf, sizeof(buf), 0);
  if (n <= 0) return std::nullopt;
  return parseStatFaults(std::string_view(buf, static_cast<size_t>(n)));
}

// A process target's fault count, from its stat file held open.
struct Process {
  uint32_t tgid = 0;
  UniqueFd fd;  // /proc/PID/stat, held open so that a reused pid is never read
  uint64_t faults = 0;

  static std::optional<Process> open(uint32_t tgid, Status& status) {
    const std::string path = "/proc/" + std::to_string(tgid) + "/stat";
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd.valid() && errno != ENOENT && errno != ESRCH) {  // hidepid, a foreign /proc mount
      status = Status::error("page_faults cannot read " + path + ": " + std::strerror(errno));
      return std::nullopt;
    }
    const std::optional<uint64_t> faults = fd.valid() ? readFaults(fd) : std::nullopt;
    if (!faults) return std::nullopt;
    return Process{tgid, std::move(fd), *faults};
  }

  std::optional<uint64_t> advance() {
    const std::optional<uint64_t> now = readFaults(fd);
    if (!now) return std::nullopt;  // exited and reaped
    const uint64_t delta = *now > faults ? *now - faults : 0;
    faults = *now;
    return delta;
  }
};

class Object final : public ProbeObject {
 public:
  Object(const TgidSlotTable& target_tgids, bool fault_program)
      : target_tgids_(target_tgids), fault_program_(fault_program) {}

  Status attach(size_t probe, const ProbeDef& def) override {
    if (probe != kPageFaults || fault_program_) BPFTRAIN_TRY(ProbeObject::attach(probe, def));
    if (probe == kPageFaults) from_proc_ = true;
    return {};
  }

  // The service has just put `tgid` in the target table; its value is the slot (the first
  // sender's when several announce the same process). Faults from now on count.
  Status attachTarget(uint32_t tgid, std::vector<LinkPtr>&) override {
    const uint32_t slot = target_tgids_.slotOf(tgid);
    if (!from_proc_ || slot == 0) return {};
    return processes_.add(slot, tgid);
  }

  void detachTarget(uint32_t slot, uint32_t tgid) override { processes_.remove(slot, tgid); }

  Status consume(SampleSink& sink) override {
    processes_.record(sink);
    return {};
  }

  void releaseSlot(uint32_t slot) override { processes_.release(slot); }

 private:
  const TgidSlotTable& target_tgids_;
  const bool fault_program_;  // --cgroup or --all: their slots count with the BPF program
  bool from_proc_ = false;    // page_faults attached: read the targets' stat files
  ProcCounterSlots<Process> processes_{metrics::kPageFaults, 1.0};
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  const bool fault_program = env.options.all_processes || !env.options.cgroups.empty();
  auto object = std::make_unique<Object>(env.target_tgids, fault_program);
  faults_bpf* skel = nullptr;
  BPFTRAIN_TRY(object->openAndLoad<fault_counts>(
      skel, BPFTRAIN_SKELETON(faults), kProbes, env, notes,
      {{kPageFaults, &metrics::kPageFaults, "", ""}, {kThpFaults, &metrics::kThpFaults, "", ""}},
      [&](faults_bpf* s) {
        const uint32_t thp_order = thpOrder();
        s->rodata->thp_order = thp_order ? thp_order : 255;  // 255: no allocation has that order
        if (thp_order == 0)
          notes.markDown(kThpFaults, "transparent huge pages are not configured in this kernel");
        // Without --cgroup and --all every slot is a process list: no program on the fault path.
        if (!fault_program) bpf_program__set_autoload(s->progs.on_page_fault_user, false);
      }));
  return std::unique_ptr<ProbeObject>(std::move(object));
}

}  // namespace

std::optional<uint64_t> parseStatFaults(std::string_view stat) {
  // minflt is field 10, majflt field 12 (cminflt between them counts children).
  uint64_t total = 0;
  for (int field : {10, 12}) {
    const std::optional<std::string_view> text = procStatField(stat, field);
    if (!text) return std::nullopt;
    uint64_t value = 0;
    const auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), value);
    if (ec != std::errc() || ptr != text->data() + text->size()) return std::nullopt;
    total += value;
  }
  return total;
}

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::faults
