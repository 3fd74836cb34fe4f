// sched_wait: how long a rank's threads were runnable but waited for a CPU, from the kernel's own
// scheduler statistics (/proc/PID/task/TID/schedstat, its run_delay; CONFIG_SCHED_INFO), read each
// step for the processes of each slot. Nothing runs on a hot path. This is the CPU-contention
// signal the diagnosis reads: task migrations were not one (clear phases showed more of them than
// phases with competing busy loops, docs/controller.md). Threads come and go, so each step lists
// the process's task directory through a /proc/PID directory held open since attachTarget() (a
// reused pid is never read); a thread's first read is its baseline, a thread gone since the last
// step takes its last increment with it. Down, with the fix, where the kernel keeps no schedstat.
#include "collector/loader/probes/sched_wait.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "collector/loader/probe_module.h"
#include "collector/loader/proc_counter_slots.h"
#include "collector/loader/proc_threads.h"

namespace bpftrain::collector::loader::probes::sched_wait {
namespace {

const ProbeDef kProbes[] = {
    {"runqueue_wait", {}, "/proc/PID/task/TID/schedstat run_delay (read each step)"},
};

// A process target's threads and the run-queue wait each had at the last step.
struct Process {
  uint32_t tgid = 0;
  UniqueFd dir;                          // /proc/PID, held open: a reused pid is never read
  std::map<uint32_t, uint64_t> wait_ns;  // per thread, at the last step
  std::string text;                      // the last schedstat read, its buffer reused

  static std::optional<Process> open(uint32_t tgid, Status& status) {
    const std::string path = "/proc/" + std::to_string(tgid);
    UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid() && errno != ENOENT && errno != ESRCH) {  // hidepid, a foreign /proc mount
      status = Status::error("runqueue_wait cannot read " + path + ": " + std::strerror(errno));
      return std::nullopt;
    }
    if (!dir.valid()) return std::nullopt;
    Process process{tgid, std::move(dir), {}, {}};
    if (!process.advance()) return std::nullopt;  // every thread's baseline
    return process;
  }

  // What the process's threads waited since the last call; nullopt once the process is gone.
  std::optional<uint64_t> advance() {
    std::map<uint32_t, uint64_t> now;
    uint64_t delta = 0;
    const bool listed = forEachThreadFile(
        dir.get(), "task", "schedstat", text, [&](uint32_t tid, const std::string& t) {
          const std::optional<uint64_t> wait = parseRunqueueWaitNs(t);
          if (!wait) return;
          if (auto it = wait_ns.find(tid); it != wait_ns.end() && *wait > it->second)
            delta += *wait - it->second;
          now.emplace(tid, *wait);
        });
    if (!listed || now.empty()) return std::nullopt;  // gone; a zombie has no threads to read
    wait_ns = std::move(now);
    return delta;
  }
};

class Object final : public ProbeObject {
 public:
  explicit Object(const TgidSlotTable& target_tgids) : target_tgids_(target_tgids) {}

  // The service has just put `tgid` in the target table; its value is the slot.
  Status attachTarget(uint32_t tgid, std::vector<LinkPtr>&) override {
    const uint32_t slot = target_tgids_.slotOf(tgid);
    return slot == 0 ? Status{} : processes_.add(slot, tgid);
  }

  void detachTarget(uint32_t slot, uint32_t tgid) override { processes_.remove(slot, tgid); }

  Status consume(SampleSink& sink) override {
    processes_.record(sink);
    return {};
  }

  void releaseSlot(uint32_t slot) override { processes_.release(slot); }

 private:
  const TgidSlotTable& target_tgids_;
  ProcCounterSlots<Process> processes_{metrics::kRunqueueWaitSeconds, 1e-9};
};

// Why the probe cannot work here, or "" when it can.
std::string noSchedstat() {
  if (::access("/proc/self/schedstat", R_OK) == 0) return "";
  return "/proc/PID/schedstat is missing: this kernel keeps no scheduler statistics "
         "(CONFIG_SCHED_INFO off); build it with CONFIG_SCHEDSTATS or CONFIG_TASK_DELAY_ACCT";
}

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  if (std::string why = noSchedstat(); !why.empty()) notes.markDown(0, std::move(why));
  return std::unique_ptr<ProbeObject>(std::make_unique<Object>(env.target_tgids));
}

}  // namespace

std::optional<uint64_t> parseRunqueueWaitNs(std::string_view schedstat) {
  const size_t first_end = schedstat.find(' ');
  if (first_end == std::string_view::npos || first_end == 0) return std::nullopt;
  std::string_view rest = schedstat.substr(first_end + 1);
  const size_t end = rest.find(' ');
  if (end == std::string_view::npos || end == 0) return std::nullopt;
  uint64_t value = 0;
  const auto [ptr, ec] = std::from_chars(rest.data(), rest.data() + end, value);
  if (ec != std::errc() || ptr != rest.data() + end) return std::nullopt;
  return value;
}

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::sched_wait
