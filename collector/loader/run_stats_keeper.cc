// The run-statistics keeper process (run_stats_keeper.h).
#include "collector/loader/run_stats_keeper.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>

namespace bpftrain::collector::loader {
namespace {

constexpr int kIn = 3, kOut = 4;  // the keeper's ends of the two pipes

// The keeper's whole life, after fork() in a threaded process: raw system calls only (no
// allocation, no locks another thread may have held at the fork).
[[noreturn]] void keep(int in, int out, pid_t parent, unsigned uid, unsigned gid) {
  prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
  if (getppid() != parent) _exit(0);  // the collector died before the line above
  if (dup2(in, kIn) < 0 || dup2(out, kOut) < 0) _exit(1);
  // Nothing of the collector's stays open here: sockets, BPF objects, log files.
  if (syscall(SYS_close_range, kOut + 1, ~0U, 0) != 0)
    for (int fd = kOut + 1; fd < 1024; ++fd) close(fd);
  close(0);
  // The collector's user, keeping the permitted set across the uid change (then only SYS_ADMIN).
  if (uid != getuid() || gid != getgid()) {
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0 || syscall(SYS_setgroups, 0, nullptr) != 0 ||
        setresgid(gid, gid, gid) != 0 || setresuid(uid, uid, uid) != 0)
      _exit(1);  // the collector sees EPIPE on its first ask and turns the statistics off
    prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
  }
  // Only CAP_SYS_ADMIN, effective and permitted; never more (no_new_privs).
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2] = {};
  caps[CAP_SYS_ADMIN / 32].permitted = caps[CAP_SYS_ADMIN / 32].effective = 1u
                                                                            << (CAP_SYS_ADMIN % 32);
  if (syscall(SYS_capset, &header, caps) != 0) {  // not held: keep nothing (the switch says EPERM)
    __user_cap_data_struct none[2] = {};
    if (syscall(SYS_capset, &header, none) != 0) _exit(1);
  }
  prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
  int stats = -1;
  for (;;) {
    char ask = 0;
    const ssize_t n = read(kIn, &ask, 1);
    if (n == 0 || (n < 0 && errno != EINTR)) _exit(0);  // the collector is gone
    if (n < 0) continue;
    int32_t err = 0;
    if (ask == '1' && stats < 0) {
      union bpf_attr attr;
      std::memset(&attr, 0, sizeof attr);
      attr.enable_stats.type = BPF_STATS_RUN_TIME;
      stats = static_cast<int>(syscall(SYS_bpf, BPF_ENABLE_STATS, &attr, sizeof attr));
      if (stats < 0) err = errno;
    } else if (ask == '0' && stats >= 0) {
      close(stats);
      stats = -1;
    }
    if (write(kOut, &err, sizeof err) != sizeof err) _exit(0);
  }
}

}  // namespace

std::unique_ptr<RunStatsKeeper> RunStatsKeeper::start(unsigned uid, unsigned gid,
                                                      std::string& error) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct caps[2] = {};
  if (syscall(SYS_capget, &header, caps) != 0 ||
      !(caps[CAP_SYS_ADMIN / 32].effective & (1u << (CAP_SYS_ADMIN % 32)))) {
    error =
        "no CAP_SYS_ADMIN to keep for switching BPF run statistics (run the collector as "
        "root, or set sysctl kernel.bpf_stats_enabled=1 and --probe-run-stats on)";
    return nullptr;
  }
  int to[2], from[2];
  if (pipe2(to, O_CLOEXEC) != 0) {
    error = std::string("run-statistics keeper: pipe: ") + std::strerror(errno);
    return nullptr;
  }
  if (pipe2(from, O_CLOEXEC) != 0) {
    error = std::string("run-statistics keeper: pipe: ") + std::strerror(errno);
    close(to[0]);
    close(to[1]);
    return nullptr;
  }
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) keep(to[0], from[1], parent, uid, gid);
  close(to[0]);
  close(from[1]);
  if (pid < 0) {
    error = std::string("run-statistics keeper: fork: ") + std::strerror(errno);
    close(to[1]);
    close(from[0]);
    return nullptr;
  }
  return std::unique_ptr<RunStatsKeeper>(new RunStatsKeeper(pid, to[1], from[0]));
}

RunStatsKeeper::~RunStatsKeeper() {
  close(to_keeper_);  // EOF: the keeper closes its fd (the statistics go off) and exits
  close(from_keeper_);
  while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
  }
}

Status RunStatsKeeper::set(bool on) {
  const char ask = on ? '1' : '0';
  int32_t err = EPIPE;
  if (write(to_keeper_, &ask, 1) != 1 || read(from_keeper_, &err, sizeof err) != sizeof err)
    err = EPIPE;
  if (err == 0) return {};
  return Status::error(std::string("the run-statistics keeper (pid ") + std::to_string(pid_) +
                       ") cannot switch BPF run statistics " + (on ? "on" : "off") + ": " +
                       std::strerror(err) + (err == EPERM ? " (it needs CAP_SYS_ADMIN)" : ""))
      .withErrno(err);
}

}  // namespace bpftrain::collector::loader
