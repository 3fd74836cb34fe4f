// sched_wait: how long a rank's threads were runnable but waited for a CPU, from the kernel's own
// scheduler statistics (/proc/PID/task/TID/schedstat, its run_delay; CONFIG_SCHED_INFO), read each
// step for the processes of each slot. Nothing runs on a hot path. This is the CPU-contention
// signal the diagnosis reads: task migrations were not one (clear phases showed more of them than
// phases with competing busy loops, docs/controller.md). Threads come and go, so each step lists
// the process's task directory through a /proc/PID directory held open since attachTarget() (a
// reused pid is never read); a thread's first read is its baseline, a thread gone since the last
// step takes its last increment with it. Down, with the fix, where the kernel keeps no schedstat.
#include "collector/loader/probes/sched_wait.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "collector/loader/probe_module.h"

namespace bpftrain::collector::loader::probes::sched_wait {
namespace {

const ProbeDef kProbes[] = {
    {"runqueue_wait", {}, "/proc/PID/task/TID/schedstat run_delay (read each step)"},
};

std::optional<uint64_t> readWaitNs(int task_dir, const char* tid) {
  char path[64];
  std::snprintf(path, sizeof path, "%s/schedstat", tid);
  UniqueFd fd(::openat(task_dir, path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return std::nullopt;
  char buf[128];
  const ssize_t n = ::read(fd.get(), buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  return parseRunqueueWaitNs(std::string_view(buf, static_cast<size_t>(n)));
}

class Object final : public ProbeObject {
 public:
  explicit Object(const TgidSlotTable& target_tgids) : target_tgids_(target_tgids) {}

  // The service has just put `tgid` in the target table; its value is the slot.
  Status attachTarget(uint32_t tgid, std::vector<LinkPtr>&) override {
    const uint32_t slot = target_tgids_.slotOf(tgid);
    if (slot == 0) return {};
    std::vector<Process>& processes = slots_[slot].processes;
    for (const Process& p : processes)
      if (p.tgid == tgid) return {};
    const std::string path = "/proc/" + std::to_string(tgid);
    UniqueFd dir(::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (!dir.valid() && errno != ENOENT && errno != ESRCH)  // hidepid, a foreign /proc mount
      return Status::error("runqueue_wait cannot read " + path + ": " + std::strerror(errno));
    if (!dir.valid()) return {};  // gone already: its slot goes when its sender does
    Process process{tgid, std::move(dir), {}};
    sample(process);  // every thread's baseline
    processes.push_back(std::move(process));
    return {};
  }

  // A process leaves a slot that stays: what it waited since the last step still counts.
  void detachTarget(uint32_t slot, uint32_t tgid) override {
    auto it = slots_.find(slot);
    if (it == slots_.end()) return;
    std::vector<Process>& processes = it->second.processes;
    for (auto p = processes.begin(); p != processes.end(); ++p) {
      if (p->tgid != tgid) continue;
      it->second.pending_ns += sample(*p).value_or(0);
      processes.erase(p);
      return;
    }
  }

  Status consume(SampleSink& sink) override {
    for (auto& [slot, state] : slots_) {
      if (!sink.live(slot)) continue;
      uint64_t waited_ns = std::exchange(state.pending_ns, 0);
      for (auto p = state.processes.begin(); p != state.processes.end();) {
        const std::optional<uint64_t> delta = sample(*p);
        if (!delta) {  // exited since the last step
          p = state.processes.erase(p);
          continue;
        }
        waited_ns += *delta;
        ++p;
      }
      if (state.id == window::kRejectedSeries - 1)
        state.id = sink.series(slot, metrics::kRunqueueWaitSeconds, {}, {});
      if (waited_ns > 0) sink.record(state.id, static_cast<double>(waited_ns) * 1e-9);
    }
    return {};
  }

  void releaseSlot(uint32_t slot) override { slots_.erase(slot); }

 private:
  struct Process {
    uint32_t tgid = 0;
    UniqueFd dir;                          // /proc/PID, held open: a reused pid is never read
    std::map<uint32_t, uint64_t> wait_ns;  // per thread, at the last step
  };
  struct SlotWait {
    std::vector<Process> processes;
    uint64_t pending_ns = 0;  // waited by processes that left the slot since the last step
    window::SeriesId id = window::kRejectedSeries - 1;  // unset
  };

  // What the process's threads waited since the last call; nullopt once the process is gone.
  static std::optional<uint64_t> sample(Process& process) {
    const int task_fd = ::openat(process.dir.get(), "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (task_fd < 0) return std::nullopt;
    DIR* tasks = ::fdopendir(task_fd);  // owns task_fd from here
    if (tasks == nullptr) {
      ::close(task_fd);
      return std::nullopt;
    }
    std::map<uint32_t, uint64_t> now;
    uint64_t delta = 0;
    while (const dirent* entry = ::readdir(tasks)) {
      uint32_t tid = 0;
      const char* name = entry->d_name;
      const auto [end, ec] = std::from_chars(name, name + std::strlen(name), tid);
      if (ec != std::errc() || *end != '\0') continue;  // "." and ".."
      const std::optional<uint64_t> wait = readWaitNs(::dirfd(tasks), name);
      if (!wait) continue;  // exited between the listing and the read
      if (auto it = process.wait_ns.find(tid); it != process.wait_ns.end() && *wait > it->second)
        delta += *wait - it->second;
      now.emplace(tid, *wait);
    }
    ::closedir(tasks);
    if (now.empty()) return std::nullopt;  // a zombie has no threads to read
    process.wait_ns = std::move(now);
    return delta;
  }

  const TgidSlotTable& target_tgids_;
  std::map<uint32_t, SlotWait> slots_;
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
