// A CPU-capped cgroup for a test's child processes: what a systemd unit's CPUQuota= does to a
// collector in production. A test can then offer a collector several times what it can take
// without needing several times the CPU of the host to do it (on 2 shared cores the senders'
// own CPU, not the collector, was the limit: nice 19 does not hold back a process on an idle
// core, SCHED_IDLE neither).
// cgroup v2 (a cgroup2 mount whose root offers the `cpu` controller: cpu.max) or v1 (the `cpu`
// hierarchy: cpu.cfs_quota_us). The group is removed in the destructor once its processes have
// gone (the test kills them first); a group left behind by a crashed test has a unique name.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <system_error>
#include <thread>

namespace bpftrain::testing {

class CpuCgroup {
 public:
  // A group capped at `cpu_fraction` of one CPU (e.g. 0.25), or nullopt with `why` set when the
  // host has no writable cpu controller (no cgroup mount, not root).
  static std::optional<CpuCgroup> create(double cpu_fraction, std::string& why) {
    namespace fs = std::filesystem;
    const std::string name = "bpftrain-test-" + std::to_string(::getpid());
    constexpr long kPeriodUs = 100000;
    const long quota_us = static_cast<long>(cpu_fraction * kPeriodUs);
    std::error_code ec;
    // v2: the unified hierarchy's root must list and delegate `cpu`.
    for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      if (!contains(readFile(std::string(root) + "/cgroup.controllers"), "cpu")) continue;
      if (!contains(readFile(std::string(root) + "/cgroup.subtree_control"), "cpu") &&
          !writeFile(std::string(root) + "/cgroup.subtree_control", "+cpu"))
        continue;
      const std::string dir = std::string(root) + "/" + name;
      fs::create_directory(dir, ec);
      if (!ec &&
          writeFile(dir + "/cpu.max", std::to_string(quota_us) + " " + std::to_string(kPeriodUs)))
        return CpuCgroup(dir);
      fs::remove(dir, ec);
    }
    // v1: the cpu hierarchy (mounted alone or as cpu,cpuacct).
    for (const char* root : {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct"}) {
      if (!fs::exists(std::string(root) + "/cpu.cfs_quota_us")) continue;
      const std::string dir = std::string(root) + "/" + name;
      fs::create_directory(dir, ec);
      if (!ec && writeFile(dir + "/cpu.cfs_period_us", std::to_string(kPeriodUs)) &&
          writeFile(dir + "/cpu.cfs_quota_us", std::to_string(quota_us)))
        return CpuCgroup(dir);
      fs::remove(dir, ec);
    }
    why =
        "no writable cgroup cpu controller (cgroup v2 cpu.max or v1 cpu.cfs_quota_us under "
        "/sys/fs/cgroup; needs root)";
    return std::nullopt;
  }

  CpuCgroup(CpuCgroup&& o) noexcept : dir_(std::move(o.dir_)) { o.dir_.clear(); }
  CpuCgroup& operator=(CpuCgroup&&) = delete;
  ~CpuCgroup() {
    if (dir_.empty()) return;
    // rmdir fails while a process (or a zombie not yet reaped) is still a member: retry briefly.
    for (int i = 0; i < 50 && ::rmdir(dir_.c_str()) != 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }

  // Moves every thread of process `pid` into the group.
  bool add(pid_t pid) const { return writeFile(dir_ + "/cgroup.procs", std::to_string(pid)); }
  const std::string& path() const { return dir_; }

  // Periods in which the group hit its quota (cpu.stat's nr_throttled, v1 and v2 alike): > 0
  // shows the cap was what held its processes back; -1 when unreadable.
  long throttledPeriods() const {
    std::ifstream f(dir_ + "/cpu.stat");
    std::string key;
    long value = 0;
    while (f >> key >> value)
      if (key == "nr_throttled") return value;
    return -1;
  }

 private:
  explicit CpuCgroup(std::string dir) : dir_(std::move(dir)) {}
  static std::string readFile(const std::string& path) {
    std::ifstream f(path);
    std::string s;
    std::getline(f, s, '\0');
    return s;
  }
  static bool contains(const std::string& words, const std::string& word) {
    size_t at = 0;
    while ((at = words.find(word, at)) != std::string::npos) {
      const bool start = at == 0 || words[at - 1] == ' ';
      const size_t end = at + word.size();
      if (start && (end == words.size() || words[end] == ' ' || words[end] == '\n')) return true;
      at = end;
    }
    return false;
  }
  static bool writeFile(const std::string& path, const std::string& text) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) return false;
    const bool ok = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    ::close(fd);
    return ok;
  }
  std::string dir_;
};

}  // namespace bpftrain::testing
