#include "trainer/launcher/launcher.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>

namespace bpftrain::trainer::launcher {
namespace {

int g_signal_pipe[2] = {-1, -1};

void onSignal(int signo) {
  int saved = errno;
  uint8_t b = uint8_t(signo);
  ssize_t ignored = write(g_signal_pipe[1], &b, 1);
  (void)ignored;
  errno = saved;
}

struct Child {
  pid_t pid = -1;
  int err_fd = -1;
  std::string partial;
  std::string last_line;
  bool exited = false;
  int status = 0;
};

// In the child, after setns: the namespace's first IPv4 address on an interface that is up.
std::string namespaceAddress() {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return "";
  std::string out;
  for (ifaddrs* a = list; a != nullptr; a = a->ifa_next) {
    if (a->ifa_addr == nullptr || a->ifa_addr->sa_family != AF_INET) continue;
    if ((a->ifa_flags & IFF_LOOPBACK) || !(a->ifa_flags & IFF_UP)) continue;
    char buf[INET_ADDRSTRLEN];
    inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(a->ifa_addr)->sin_addr, buf, sizeof(buf));
    out = buf;
    break;
  }
  freeifaddrs(list);
  return out;
}

[[noreturn]] void childFail(const std::string& msg) {
  std::string line = "bpftrain-train: " + msg + "\n";
  ssize_t ignored = write(2, line.data(), line.size());
  (void)ignored;
  _exit(127);
}

std::string describeStatus(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

}  // namespace

std::vector<int> nodesFromNamespaces(const std::vector<std::string>& netns) {
  std::map<std::string, int> index;
  std::vector<int> out;
  for (const std::string& ns : netns) {
    auto it = index.emplace(ns, int(index.size())).first;
    out.push_back(it->second);
  }
  return out;
}

namespace {

// One start of all ranks, run until every rank has exited.
struct Attempt {
  int failed_rank = -1;
  int failed_status = 0;
  std::string failed_line;
  int forwarded_signal = 0;
  std::chrono::steady_clock::time_point failed_at;
  std::chrono::steady_clock::time_point first_resumed_step;  // {} until rank 0 reports it
};

Attempt runAttempt(const LaunchSpec& spec, const std::string& store, bool resume,
                   const std::vector<int>& node_of, const std::vector<int>& local_rank,
                   const std::vector<int>& local_world) {
  Attempt result;
  std::vector<Child> children(size_t(spec.ranks));
  int& failed_rank = result.failed_rank;
  int& forwarded_signal = result.forwarded_signal;
  auto stop_deadline = std::chrono::steady_clock::time_point::max();
  bool killed = false;
  auto stopOthers = [&](int signo) {
    for (Child& c : children)
      if (!c.exited && c.pid > 0) kill(c.pid, signo);
    if (stop_deadline == std::chrono::steady_clock::time_point::max())
      stop_deadline = std::chrono::steady_clock::now() + spec.stop_timeout;
  };

  for (int r = 0; r < spec.ranks; ++r) {
    std::vector<std::string> args{spec.executable};
    args.insert(args.end(), spec.rank_args.begin(), spec.rank_args.end());
    if (resume && std::find(args.begin(), args.end(), "--resume") == args.end())
      args.push_back("--resume");
    args.insert(args.end(), {"--rank", std::to_string(r), "--world", std::to_string(spec.ranks),
                             "--local-rank", std::to_string(local_rank[size_t(r)]), "--local-world",
                             std::to_string(local_world[size_t(r)]), "--store", store});
    if (!node_of.empty()) {
      std::string list;
      for (size_t i = 0; i < node_of.size(); ++i)
        list += (i ? "," : "") + std::to_string(node_of[i]);
      args.insert(args.end(), {"--node-of", list});
    }
    int err[2];
    if (pipe2(err, O_CLOEXEC) != 0) {
      std::fprintf(stderr, "bpftrain-train: pipe: %s\n", std::strerror(errno));
      stopOthers(SIGTERM);
      failed_rank = r;
      break;
    }
    const std::string ns = spec.netns.empty() ? "" : spec.netns[size_t(r)];
    pid_t pid = fork();
    if (pid == 0) {
      dup2(err[1], 2);
      prctl(PR_SET_PDEATHSIG, SIGKILL);  // a killed launcher takes its ranks along
      for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) signal(s, SIG_DFL);
      if (!ns.empty()) {
        std::string path = "/run/netns/" + ns;
        int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
        if (fd < 0 || setns(fd, CLONE_NEWNET) != 0)
          childFail("rank " + std::to_string(r) + ": cannot enter network namespace " + ns + " (" +
                    path + "): " + std::strerror(errno) +
                    " (create it with ip netns add, as root)");
        close(fd);
        std::string addr = namespaceAddress();
        if (addr.empty())
          childFail("rank " + std::to_string(r) + ": network namespace " + ns +
                    " has no IPv4 address on an interface that is up");
        if (std::find(args.begin(), args.end(), "--bind") == args.end())
          args.insert(args.end(), {"--bind", addr});
      }
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(spec.executable.c_str(), argv.data());
      childFail("cannot start " + spec.executable + ": " + std::strerror(errno));
    }
    close(err[1]);
    if (pid < 0) {
      close(err[0]);
      std::fprintf(stderr, "bpftrain-train: fork: %s\n", std::strerror(errno));
      failed_rank = r;
      stopOthers(SIGTERM);
      break;
    }
    fcntl(err[0], F_SETFL, O_NONBLOCK);
    children[size_t(r)].pid = pid;
    children[size_t(r)].err_fd = err[0];
    std::printf("bpftrain-train: launcher: rank %d pid %d%s%s\n", r, int(pid),
                ns.empty() ? "" : " netns ", ns.c_str());
  }
  std::fflush(stdout);

  auto drain = [&](int r) {
    Child& c = children[size_t(r)];
    char buf[4096];
    for (;;) {
      ssize_t n = read(c.err_fd, buf, sizeof(buf));
      if (n <= 0) {
        if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
          close(c.err_fd);
          c.err_fd = -1;
        }
        break;
      }
      c.partial.append(buf, size_t(n));
      size_t nl;
      while ((nl = c.partial.find('\n')) != std::string::npos) {
        std::string line = c.partial.substr(0, nl);
        c.partial.erase(0, nl + 1);
        // The restart timing mark is progress, not an error line to name a failure by.
        if (line.find(kFirstResumedStepMarker) != std::string::npos) {
          if (result.first_resumed_step == std::chrono::steady_clock::time_point{})
            result.first_resumed_step = std::chrono::steady_clock::now();
        } else if (!line.empty()) {
          c.last_line = line;
        }
        std::fprintf(stderr, "[rank %d] %s\n", r, line.c_str());
      }
    }
  };

  for (;;) {
    bool all_done = std::all_of(children.begin(), children.end(), [](const Child& c) {
      return c.pid < 0 || (c.exited && c.err_fd < 0);
    });
    if (all_done) break;
    std::vector<pollfd> fds{{g_signal_pipe[0], POLLIN, 0}};
    std::vector<int> owners{-1};
    for (int r = 0; r < spec.ranks; ++r)
      if (children[size_t(r)].err_fd >= 0) {
        fds.push_back({children[size_t(r)].err_fd, POLLIN, 0});
        owners.push_back(r);
      }
    poll(fds.data(), fds.size(), 100);
    for (size_t i = 1; i < fds.size(); ++i)
      if (fds[i].revents != 0) drain(owners[i]);
    uint8_t sigs[64];
    ssize_t ns = read(g_signal_pipe[0], sigs, sizeof(sigs));
    for (ssize_t i = 0; i < ns; ++i) {
      int s = sigs[i];
      if (s == SIGCHLD) continue;
      if (forwarded_signal == 0) {
        forwarded_signal = s;
        std::fprintf(stderr, "bpftrain-train: launcher: %s: stopping %d ranks\n", strsignal(s),
                     spec.ranks);
        stopOthers(s);
      } else {
        stopOthers(SIGKILL);  // a second signal: no more waiting
      }
    }
    int status = 0;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
      for (int r = 0; r < spec.ranks; ++r) {
        Child& c = children[size_t(r)];
        if (c.pid != pid) continue;
        c.exited = true;
        c.status = status;
        if (c.err_fd >= 0) drain(r);
        bool ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
        if (!ok && failed_rank < 0 && forwarded_signal == 0) {
          failed_rank = r;
          result.failed_at = std::chrono::steady_clock::now();
          std::fprintf(stderr,
                       "bpftrain-train: rank %d (pid %d) %s%s%s; stopping the other ranks\n", r,
                       int(pid), describeStatus(status).c_str(), c.last_line.empty() ? "" : ": ",
                       c.last_line.c_str());
          stopOthers(SIGTERM);
        }
      }
    }
    if (!killed && std::chrono::steady_clock::now() >= stop_deadline) {
      killed = true;
      for (int r = 0; r < spec.ranks; ++r)
        if (!children[size_t(r)].exited && children[size_t(r)].pid > 0) {
          std::fprintf(stderr, "bpftrain-train: rank %d did not stop within %lld ms: killing it\n",
                       r, static_cast<long long>(spec.stop_timeout.count()));
          kill(children[size_t(r)].pid, SIGKILL);
        }
    }
  }
  if (failed_rank >= 0) {
    const Child& c = children[size_t(failed_rank)];
    result.failed_status = c.status;
    result.failed_line = c.last_line;
  }
  return result;
}

}  // namespace

int runLauncher(const LaunchSpec& spec) {
  namespace fs = std::filesystem;
  std::string store = spec.store;
  bool own_store = false;
  if (store.empty()) {
    char tmpl[] = "/tmp/bpftrain-store-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      std::fprintf(stderr, "bpftrain-train: cannot create a store directory in /tmp: %s\n",
                   std::strerror(errno));
      return 1;
    }
    store = tmpl;
    own_store = true;
  }
  std::vector<int> node_of = spec.node_of;
  if (node_of.empty() && !spec.netns.empty()) node_of = nodesFromNamespaces(spec.netns);
  // Local rank = index among the ranks on the same node: pinning is planned per node.
  std::vector<int> local_rank(size_t(spec.ranks)), local_world(size_t(spec.ranks));
  for (int r = 0; r < spec.ranks; ++r) {
    int node = node_of.empty() ? 0 : node_of[size_t(r)];
    for (int q = 0; q < spec.ranks; ++q) {
      int qn = node_of.empty() ? 0 : node_of[size_t(q)];
      if (qn != node) continue;
      if (q < r) ++local_rank[size_t(r)];
      ++local_world[size_t(r)];
    }
  }

  if (pipe2(g_signal_pipe, O_CLOEXEC | O_NONBLOCK) != 0) return 1;
  struct sigaction sa {};
  sa.sa_handler = onSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaction(s, &sa, nullptr);

  Attempt last;
  std::chrono::steady_clock::time_point previous_failure{};
  for (int attempt = 0;; ++attempt) {
    // Gloo's stores never overwrite a key: a restart rendezvous in a fresh subdirectory.
    std::string attempt_store = store;
    if (attempt > 0) {
      attempt_store = store + "/restart-" + std::to_string(attempt);
      std::error_code ec;
      fs::create_directories(attempt_store, ec);
    }
    last = runAttempt(spec, attempt_store, attempt > 0, node_of, local_rank, local_world);
    if (attempt > 0) {
      if (last.first_resumed_step != std::chrono::steady_clock::time_point{})
        std::fprintf(
            stderr,
            "bpftrain-train: launcher: restart %d: first resumed step %.3f s after the "
            "failure\n",
            attempt,
            std::chrono::duration<double>(last.first_resumed_step - previous_failure).count());
      else
        std::fprintf(stderr, "bpftrain-train: launcher: restart %d: no resumed step completed\n",
                     attempt);
    }
    if (last.failed_rank < 0 || last.forwarded_signal != 0 || attempt >= spec.restarts) break;
    previous_failure = last.failed_at;
    std::fprintf(stderr,
                 "bpftrain-train: launcher: rank %d failed; restart %d of %d from the newest valid "
                 "checkpoint\n",
                 last.failed_rank, attempt + 1, spec.restarts);
  }
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) signal(s, SIG_DFL);
  close(g_signal_pipe[0]);
  close(g_signal_pipe[1]);
  if (own_store) {
    std::error_code ec;
    fs::remove_all(store, ec);
  }
  if (last.failed_rank >= 0) {
    std::fprintf(stderr, "bpftrain-train: failed: rank %d %s%s%s\n", last.failed_rank,
                 describeStatus(last.failed_status).c_str(), last.failed_line.empty() ? "" : ": ",
                 last.failed_line.c_str());
    return 1;
  }
  if (last.forwarded_signal != 0) return 128 + last.forwarded_signal;
  return 0;
}

}  // namespace bpftrain::trainer::launcher
