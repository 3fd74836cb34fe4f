// Test helpers: run a binary from the build tree as a child process with its stdout/stderr in
// pipes, read lines with deadlines, scrape /metrics over plain HTTP. Children are killed in
// the destructor, so a failing test leaves no process behind.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

namespace bpftrain::testing {

inline std::string buildPath(const std::string& rel) {
  const char* dir = std::getenv("BPFTRAIN_BUILD_DIR");
  return std::string(dir ? dir : ".") + "/" + rel;
}

class ChildProcess {
 public:
  explicit ChildProcess(std::vector<std::string> argv) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      dup2(out[1], 1);
      dup2(err[1], 2);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    close(err[1]);
    out_ = out[0];
    err_ = err[0];
  }
  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) close(out_);
    if (err_ >= 0) close(err_);
  }
  pid_t pid() const { return pid_; }

  // Next stdout line matching `re` (earlier lines are kept in stdoutText()), or nullopt.
  std::optional<std::smatch> waitLine(const std::regex& re, std::chrono::milliseconds limit,
                                      bool from_stderr = false) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    std::string& buf = from_stderr ? err_buf_ : out_buf_;
    size_t& pos = from_stderr ? err_pos_ : out_pos_;
    for (;;) {
      size_t nl;
      while ((nl = buf.find('\n', pos)) != std::string::npos) {
        line_ = buf.substr(pos, nl - pos);
        pos = nl + 1;
        std::smatch m;
        if (std::regex_search(line_, m, re)) return m;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || !pump(int(left.count()))) return std::nullopt;
    }
  }

  // Waits for the exit status (or -1 on timeout); drains output meanwhile.
  int wait(std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < deadline) {
      int status;
      pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exited_ = true;
        while (pump(0)) {
        }
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      pump(20);
    }
    return -1;
  }

  const std::string& stdoutText() const { return out_buf_; }
  const std::string& stderrText() const { return err_buf_; }

 private:
  // Reads whatever is available within timeout_ms; false when both pipes are at EOF.
  bool pump(int timeout_ms) {
    pollfd fds[2] = {{out_, POLLIN, 0}, {err_, POLLIN, 0}};
    if (poll(fds, 2, timeout_ms) <= 0) return out_open_ || err_open_;
    char b[4096];
    if (fds[0].revents) {
      ssize_t n = read(out_, b, sizeof b);
      if (n > 0)
        out_buf_.append(b, size_t(n));
      else
        out_open_ = false, fds[0].fd = -1;
    }
    if (fds[1].revents) {
      ssize_t n = read(err_, b, sizeof b);
      if (n > 0)
        err_buf_.append(b, size_t(n));
      else
        err_open_ = false;
    }
    return out_open_ || err_open_;
  }

  pid_t pid_ = -1;
  int out_ = -1, err_ = -1;
  bool exited_ = false, out_open_ = true, err_open_ = true;
  std::string out_buf_, err_buf_, line_;
  size_t out_pos_ = 0, err_pos_ = 0;
};

// GET http://host:port/path; body, or empty on failure.
inline std::string httpGet(const std::string& host, int port,
                           const std::string& path = "/metrics") {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
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
