// One file of every thread of a process, /proc/PID/task/TID/<file>, for the probes that read the
// kernel's own per-thread statistics each step: numa_hints' sched (NUMA fault locality) and
// sched_wait's schedstat (run-queue wait).
#pragma once

#include <dirent.h>
#include <fcntl.h>
#include <unistd.h>

#include <charconv>
#include <cstdint>
#include <cstring>
#include <string>

#include "collector/loader/bpf_handles.h"

namespace bpftrain::collector::loader {

// Reads the file at `path` below `dir` (an fd, or AT_FDCWD for an absolute path) into `text`.
inline bool readFileAt(int dir, const char* path, std::string& text) {
  UniqueFd fd(::openat(dir, path, O_RDONLY | O_CLOEXEC));
  if (!fd.valid()) return false;
  text.clear();
  char buf[4096];
  for (ssize_t n; (n = ::read(fd.get(), buf, sizeof buf)) > 0;) text.append(buf, size_t(n));
  return !text.empty();
}

// Calls visit(tid, text) for each thread listed in the task directory `task_dir` (below `dir`:
// /proc/PID/task from AT_FDCWD, or "task" below an open /proc/PID), with the text of its `file`
// read into `text` (kept by the caller, so that steps reuse its buffer). A thread that exits
// between the listing and the read is skipped. false when the task directory cannot be opened:
// the process is gone.
template <typename Visit>
bool forEachThreadFile(int dir, const char* task_dir, const char* file, std::string& text,
                       Visit&& visit) {
  const int task_fd = ::openat(dir, task_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (task_fd < 0) return false;
  DIR* tasks = ::fdopendir(task_fd);  // owns task_fd from here
  if (tasks == nullptr) {
    ::close(task_fd);
    return false;
  }
  std::string path;  // "TID/file", its buffer reused thread after thread
  while (const dirent* entry = ::readdir(tasks)) {
    uint32_t tid = 0;
    const char* name = entry->d_name;
    const auto [end, ec] = std::from_chars(name, name + std::strlen(name), tid);
    if (ec != std::errc() || *end != '\0') continue;  // "." and ".."
    path.assign(name).append(1, '/').append(file);
    if (readFileAt(::dirfd(tasks), path.c_str(), text)) visit(tid, text);
  }
  ::closedir(tasks);
  return true;
}

}  // namespace bpftrain::collector::loader
