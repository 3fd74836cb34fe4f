// Test support shared by the e2e, bpf and bench tests: run a binary as a child process in its
// own process group with stdout/stderr captured through pipes, read its output with deadlines,
// and scrape /metrics over plain HTTP. The destructor kills the whole process group of a child
// that was not reaped, so a failing test leaves nothing running (launchers included).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace bpftrain::testing {

// Path of a build output: $BPFTRAIN_BUILD_DIR (set by bpftrain_test() for ctest) + "/" + rel.
inline std::string buildPath(const std::string& rel) {
  const char* dir = std::getenv("BPFTRAIN_BUILD_DIR");
  return std::string(dir ? dir : ".") + "/" + rel;
}

class ChildProcess {
 public:
  explicit ChildProcess(std::vector<std::string> argv) {
    // Built before fork: the test process may have threads, and the child must not allocate.
    std::vector<char*> args;
    for (auto& a : argv) args.push_back(a.data());
    args.push_back(nullptr);
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0) return;
    if (pipe2(err, O_CLOEXEC) != 0) {
      close(out[0]);
      close(out[1]);
      return;
    }
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      execv(args[0], args.data());
      _exit(127);
    }
    if (pid_ > 0) setpgid(pid_, pid_);  // both sides, so neither order of events races
    close(out[1]);
    close(err[1]);
    if (pid_ < 0) {
      close(out[0]);
      close(err[0]);
      return;
    }
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~ChildProcess() {
    if (pid_ > 0 && !status_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }

  // Everything read so far from the child's stdout / stderr.
  std::string out, err;

  // Reads output until `done()` holds, both pipes are closed, or the deadline passes. Returns
  // whether `done` held.
  bool readUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (out_fd_ < 0 && err_fd_ < 0) return false;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollOnce(std::min<long long>(left.count(), 200));
    }
    return true;
  }

  // Until `text` appears anywhere in stdout or stderr.
  bool waitFor(const std::string& text, std::chrono::milliseconds limit) {
    return readUntil(
        [&] { return out.find(text) != std::string::npos || err.find(text) != std::string::npos; },
        limit);
  }

  // The next line of stdout (or stderr) matching `re`, scanning on from the last line this
  // looked at; nullopt on timeout or EOF. The match refers to a copy of the line that stays
  // valid until the next waitLine call.
  std::optional<std::smatch> waitLine(const std::regex& re, std::chrono::milliseconds limit,
                                      bool from_stderr = false) {
    const std::string& buf = from_stderr ? err : out;
    size_t& pos = from_stderr ? err_line_pos_ : out_line_pos_;
    std::smatch m;
    bool found = readUntil(
        [&] {
          for (size_t nl; (nl = buf.find('\n', pos)) != std::string::npos;) {
            line_ = buf.substr(pos, nl - pos);
            pos = nl + 1;
            if (std::regex_search(line_, m, re)) return true;
          }
          return false;
        },
        limit);
    if (!found) return std::nullopt;
    return m;
  }

  // Waits until the child has exited and its pipes are closed (everything it and its children
  // wrote has been read), reading output meanwhile. Returns the raw wait status once the child
  // has been reaped, even if something it started still holds the pipes at the deadline;
  // nullopt when it is still running.
  std::optional<int> wait(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    for (;;) {
      if (!status_ && pid_ > 0) {
        int st = 0;
        if (waitpid(pid_, &st, WNOHANG) == pid_) status_ = st;
      }
      if (status_ && out_fd_ < 0 && err_fd_ < 0) return status_;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return status_;
      // Pipes still open: wake on output; closed: poll the exit status every few ms.
      pollOnce(std::min<long long>(left.count(), out_fd_ < 0 && err_fd_ < 0 ? 5 : 20));
    }
  }

  // Exit code (128 + signal when killed by one), or -1 when still running at the deadline.
  int exitCode(std::chrono::milliseconds limit) {
    auto st = wait(limit);
    if (!st) return -1;
    if (WIFEXITED(*st)) return WEXITSTATUS(*st);
    return 128 + WTERMSIG(*st);
  }

 private:
  void pollOnce(long long timeout_ms) {
    pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
    if (poll(fds, 2, int(timeout_ms)) <= 0) return;
    pump(out_fd_, out, fds[0].revents);
    pump(err_fd_, err, fds[1].revents);
  }
  static void pump(int& fd, std::string& sink, short revents) {
    if (fd < 0 || revents == 0) return;
    char buf[8192];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n > 0) {
      sink.append(buf, size_t(n));
    } else {
      close(fd);
      fd = -1;
    }
  }

  pid_t pid_ = -1;
  int out_fd_ = -1, err_fd_ = -1;
  std::optional<int> status_;
  std::string line_;
  size_t out_line_pos_ = 0, err_line_pos_ = 0;
};

// GET http://host:port/path; the body, or empty on failure.
inline std::string httpGet(const std::string& host, int port,
                           const std::string& path = "/metrics") {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  inet_pton(AF_INET, host.c_str(), &a.sin_addr);
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    close(fd);
    return {};
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host + "\r\n\r\n";
  if (write(fd, req.data(), req.size()) != ssize_t(req.size())) {
    close(fd);
    return {};
  }
  std::string resp;
  char b[8192];
  ssize_t n;
  while ((n = read(fd, b, sizeof b)) > 0) resp.append(b, size_t(n));
  close(fd);
  size_t body = resp.find("\r\n\r\n");
  return body == std::string::npos ? std::string() : resp.substr(body + 4);
}

// Prometheus text format -> {"name{labels}" -> value} (labels as printed).
inline std::map<std::string, double> parseMetrics(const std::string& text) {
  std::map<std::string, double> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t nl = text.find('\n', pos);
    std::string line = text.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos);
    pos = nl == std::string::npos ? text.size() : nl + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    out[line.substr(0, sp)] = std::strtod(line.c_str() + sp + 1, nullptr);
  }
  return out;
}

}  // namespace bpftrain::testing
