// A child process for e2e tests: stdout and stderr captured through pipes, read with deadlines,
// and the whole process group killed on destruction so a failing test leaves nothing running.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace bpftrain::testing {

class Subprocess {
 public:
  explicit Subprocess(std::vector<std::string> argv) {
    int out[2], err[2];
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      setpgid(0, 0);
      dup2(out[1], 1);
      dup2(err[1], 2);
      std::vector<char*> args;
      for (auto& a : argv) args.push_back(a.data());
      args.push_back(nullptr);
      execv(args[0], args.data());
      _exit(127);
    }
    setpgid(pid_, pid_);
    close(out[1]);
    close(err[1]);
    out_fd_ = out[0];
    err_fd_ = err[0];
  }
  ~Subprocess() {
    if (pid_ > 0 && !status_) {
      kill(-pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_fd_ >= 0) close(out_fd_);
    if (err_fd_ >= 0) close(err_fd_);
  }
  pid_t pid() const { return pid_; }

  // Reads output until `done(out, err)` holds, the process exits and its pipes close, or the
  // deadline passes. Returns whether `done` held.
  bool readUntil(const std::function<bool()>& done, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (!done()) {
      if (out_fd_ < 0 && err_fd_ < 0) return false;
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd fds[2] = {{out_fd_, POLLIN, 0}, {err_fd_, POLLIN, 0}};
      if (poll(fds, 2, int(std::min<long long>(left.count(), 200))) <= 0) continue;
      pump(out_fd_, out, fds[0].revents);
      pump(err_fd_, err, fds[1].revents);
    }
    return true;
  }
  bool waitFor(const std::string& text, std::chrono::milliseconds limit) {
    return readUntil(
        [&] { return out.find(text) != std::string::npos || err.find(text) != std::string::npos; },
        limit);
  }
  // Waits for exit (reading output meanwhile); nullopt on timeout.
  std::optional<int> wait(std::chrono::milliseconds limit) {
    readUntil([] { return false; }, limit);
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (!status_) {
      int st = 0;
      pid_t r = waitpid(pid_, &st, WNOHANG);
      if (r == pid_)
        status_ = st;
      else if (std::chrono::steady_clock::now() > deadline)
        return std::nullopt;
      else
        usleep(1000);
    }
    return status_;
  }
  int exitCode(std::chrono::milliseconds limit) {
    auto st = wait(limit);
    if (!st) return -1;
    if (WIFEXITED(*st)) return WEXITSTATUS(*st);
    return 128 + WTERMSIG(*st);
  }

  std::string out, err;

 private:
  void pump(int& fd, std::string& sink, short revents) {
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
};

}  // namespace bpftrain::testing
