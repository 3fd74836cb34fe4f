#include "collector/discovery/process_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <optional>
#include <string_view>

#include "common/proc_stat.h"

namespace bpftrain::collector::discovery {
namespace {

struct DirCloser {
  void operator()(DIR* d) const { ::closedir(d); }
};

bool pidName(const char* name, pid_t& pid) {
  const size_t n = std::strlen(name);
  auto [p, ec] = std::from_chars(name, name + n, pid);
  return ec == std::errc() && p == name + n && pid > 0;
}

}  // namespace

bool ProcessTable::readStat(pid_t pid, ProcessInfo& out) const {
  const std::string path = root_ + "/" + std::to_string(pid) + "/stat";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[1024];
  const ssize_t n = ::read(fd, buf, sizeof(buf) - 1);
  ::close(fd);
  if (n <= 0) return false;
  // "PID (COMM) STATE PPID ... STARTTIME ...": ppid is field 4, starttime field 22.
  const std::string_view s(buf, size_t(n));
  const std::optional<std::string_view> ppid_text = procStatField(s, 4);
  const std::optional<std::string_view> start_text = procStatField(s, 22);
  uint64_t ppid = 0, start = 0;
  if (!ppid_text || !start_text ||
      std::from_chars(ppid_text->begin(), ppid_text->end(), ppid).ec != std::errc() ||
      std::from_chars(start_text->begin(), start_text->end(), start).ec != std::errc())
    return false;
  out.pid = pid;
  out.ppid = pid_t(ppid);
  out.start_ticks = start;
  return true;
}

bool ProcessTable::alive(const ProcessInfo& p) const {
  ProcessInfo now;
  return readStat(p.pid, now) && now.start_ticks == p.start_ticks;
}

ProcessTable::Changes ProcessTable::scan() {
  Changes changes;
  std::unique_ptr<DIR, DirCloser> dir(::opendir(root_.c_str()));
  if (!dir) return changes;
  seen_.clear();
  while (const dirent* e = ::readdir(dir.get())) {
    pid_t pid = 0;
    if (!pidName(e->d_name, pid)) continue;
    seen_.push_back(pid);
    if (known_.count(pid)) continue;
    ProcessInfo info;
    if (!readStat(pid, info)) continue;  // exited between readdir and open
    known_.emplace(pid, info);
    changes.started.push_back(info);
  }
  std::sort(seen_.begin(), seen_.end());
  for (auto it = known_.begin(); it != known_.end();) {
    if (std::binary_search(seen_.begin(), seen_.end(), it->first)) {
      ++it;
      continue;
    }
    changes.exited.push_back(it->second);
    it = known_.erase(it);
  }
  return changes;
}

}  // namespace bpftrain::collector::discovery
