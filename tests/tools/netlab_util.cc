#include "tests/tools/netlab_util.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <future>
#include <thread>

namespace bpftrain::tools::testing {
namespace {

using Clock = std::chrono::steady_clock;

// Enters namespace `name` for the calling thread only (network namespaces are per thread).
bool enterNetns(const std::string& name) {
  int fd = open(("/run/netns/" + name).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  bool ok = setns(fd, CLONE_NEWNET) == 0;
  close(fd);
  return ok;
}

int decodeStatus(int st) {
  if (WIFEXITED(st)) return WEXITSTATUS(st);
  if (WIFSIGNALED(st)) return 128 + WTERMSIG(st);
  return -1;
}

pid_t spawn(const std::vector<std::string>& argv, int& read_fd) {
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return -1;
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    dup2(p[1], 2);
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execvp(args[0], args.data());
    _exit(127);
  }
  close(p[1]);
  read_fd = p[0];
  return pid;
}

bool waitReadable(int fd, Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return false;
  pollfd pfd{fd, POLLIN, 0};
  return poll(&pfd, 1, int(left.count())) > 0;
}

// A TCP listener on addr, port chosen by the kernel (written to `port`); -1 on failure.
int listenOn(const std::string& addr, uint16_t& port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
  socklen_t len = sizeof a;
  if (bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(s, 1) != 0 ||
      getsockname(s, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(s);
    return -1;
  }
  port = ntohs(a.sin_port);
  return s;
}

// A TCP connection to addr:port; -1 on failure.
int connectTo(const std::string& addr, uint16_t port) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, addr.c_str(), &a.sin_addr);
  if (connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(s);
    return -1;
  }
  return s;
}

}  // namespace

std::string sourceDir() {
  const char* s = std::getenv("BPFTRAIN_SOURCE_DIR");
  return s != nullptr ? s : std::filesystem::current_path().string();
}

std::string netlabPath() { return sourceDir() + "/tools/netlab"; }

CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::seconds timeout) {
  Child c(argv);
  CommandResult r;
  std::optional<int> st = c.wait(timeout);
  r.status = st.value_or(-1);
  r.out = c.output();
  return r;
}

Child::Child(const std::vector<std::string>& argv) { pid_ = spawn(argv, fd_); }

Child::~Child() {
  if (pid_ > 0 && !status_) {
    kill(pid_, SIGKILL);
    int st;
    waitpid(pid_, &st, 0);
  }
  if (fd_ >= 0) close(fd_);
}

void Child::readAvailable(int timeout_ms) {
  pollfd pfd{fd_, POLLIN, 0};
  while (fd_ >= 0 && poll(&pfd, 1, timeout_ms) > 0) {
    char buf[4096];
    ssize_t n = read(fd_, buf, sizeof buf);
    if (n <= 0) {
      close(fd_);
      fd_ = -1;
      break;
    }
    out_.append(buf, size_t(n));
    timeout_ms = 0;
  }
}

bool Child::waitForLine(const std::string& needle, std::chrono::milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (out_.find(needle) == std::string::npos) {
    if (fd_ < 0 || !waitReadable(fd_, deadline)) return out_.find(needle) != std::string::npos;
    readAvailable(0);
  }
  return true;
}

std::optional<int> Child::wait(std::chrono::milliseconds timeout) {
  if (status_) return status_;
  auto deadline = Clock::now() + timeout;
  while (true) {
    readAvailable(20);
    int st;
    pid_t r = waitpid(pid_, &st, WNOHANG);
    if (r == pid_) {
      status_ = decodeStatus(st);
      readAvailable(0);
      return status_;
    }
    if (Clock::now() >= deadline) return std::nullopt;
    if (fd_ < 0) std::this_thread::sleep_for(std::chrono::milliseconds(20));  // pipe closed early
  }
}

std::vector<std::string> namespacesWithPrefix(const std::string& prefix) {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/run/netns", ec)) {
    std::string n = e.path().filename().string();
    if (n.rfind(prefix, 0) == 0) v.push_back(n);
  }
  return v;
}

bool processAlive(pid_t pid) { return kill(pid, 0) == 0 || errno != ESRCH; }

double tcpRateMbps(const std::string& from, const std::string& to, const std::string& to_addr,
                   double seconds) {
  std::promise<uint16_t> port_p;
  auto port_f = port_p.get_future();
  std::atomic<double> rate{-1};
  std::thread rx([&] {
    uint16_t bound = 0;
    int s = enterNetns(to) ? listenOn(to_addr, bound) : -1;
    if (s < 0) return port_p.set_value(0);
    port_p.set_value(bound);
    if (!waitReadable(s, Clock::now() + std::chrono::seconds(10))) return (void)close(s);
    int c = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
    close(s);
    if (c < 0) return;
    std::vector<char> buf(1 << 20);
    uint64_t bytes = 0;
    Clock::time_point first{};
    auto deadline = Clock::now() + std::chrono::seconds(int(seconds) + 30);
    while (waitReadable(c, deadline)) {
      ssize_t n = read(c, buf.data(), buf.size());
      if (n <= 0) break;
      if (bytes == 0) first = Clock::now();
      bytes += uint64_t(n);
    }
    double el = std::chrono::duration<double>(Clock::now() - first).count();
    close(c);
    if (bytes > 0 && el > 0) rate = double(bytes) * 8 / el / 1e6;
  });
  uint16_t port = port_f.get();
  bool sent = false;
  if (port != 0) {
    std::thread tx([&] {
      int s = enterNetns(from) ? connectTo(to_addr, port) : -1;
      if (s < 0) return;
      std::vector<char> buf(256 << 10, 'x');
      auto end = Clock::now() + std::chrono::duration<double>(seconds);
      while (Clock::now() < end) {
        if (send(s, buf.data(), buf.size(), MSG_NOSIGNAL) <= 0) break;
      }
      shutdown(s, SHUT_WR);
      close(s);
      sent = true;
    });
    tx.join();
  }
  rx.join();
  return sent ? rate.load() : -1;
}

bool tcpEcho(const std::string& from, const std::string& to, const std::string& to_addr) {
  std::promise<uint16_t> port_p;
  auto port_f = port_p.get_future();
  std::atomic<bool> ok{false};
  std::thread srv([&] {
    uint16_t bound = 0;
    int s = enterNetns(to) ? listenOn(to_addr, bound) : -1;
    if (s < 0) return port_p.set_value(0);
    port_p.set_value(bound);
    if (!waitReadable(s, Clock::now() + std::chrono::seconds(5))) return (void)close(s);
    int c = accept4(s, nullptr, nullptr, SOCK_CLOEXEC);
    close(s);
    char b;
    if (c >= 0 && waitReadable(c, Clock::now() + std::chrono::seconds(5)) && read(c, &b, 1) == 1)
      (void)!write(c, &b, 1);
    if (c >= 0) close(c);
  });
  uint16_t port = port_f.get();
  if (port != 0) {
    std::thread cli([&] {
      int s = enterNetns(from) ? connectTo(to_addr, port) : -1;
      if (s < 0) return;
      char b = 'e', r = 0;
      if (write(s, &b, 1) == 1 && waitReadable(s, Clock::now() + std::chrono::seconds(5)) &&
          read(s, &r, 1) == 1)
        ok = r == 'e';
      close(s);
    });
    cli.join();
  }
  srv.join();
  return ok;
}

}  // namespace bpftrain::tools::testing
