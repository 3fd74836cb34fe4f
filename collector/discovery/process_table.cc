#include "collector/discovery/process_table.h"

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <memory>
#include <string_view>

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
  // "PID (COMM) STATE PPID ... STARTTIME ...": COMM may hold spaces and parentheses, so fields
  // are counted from the last ')'.
  std::string_view s(buf, size_t(n));
  const size_t close = s.rfind(')');
  if (close == std::string_view::npos) return false;
  s.remove_prefix(close + 1);
  // After ')': field 3 (state) is the first; ppid is field 4, starttime field 22.
  int field = 2;
  uint64_t ppid = 0, start = 0;
  bool have_ppid = false, have_start = false;
  while (!s.empty() && !have_start) {
    while (!s.empty() && s.front() == ' ') s.remove_prefix(1);
    const size_t end = std::min(s.find(' '), s.size());
    const std::string_view token = s.substr(0, end);
    s.remove_prefix(end);
    ++field;
    if (field == 4) have_ppid = std::from_chars(token.begin(), token.end(), ppid).ec == std::errc();
    if (field == 22)
      have_start = std::from_chars(token.begin(), token.end(), start).ec == std::errc();
  }
  if (!have_ppid || !have_start) return false;
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
