// Helpers for tests that drive tools/netlab: run a command with a deadline, list namespaces,
// and move TCP traffic between namespaces from threads that setns() into them.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <vector>

namespace bpftrain::tools::testing {

std::string sourceDir();
std::string netlabPath();

struct CommandResult {
  int status = -1;  // exit status, or 128 + signal
  std::string out;  // stdout and stderr
};
// Runs argv to completion (killed after `timeout`).
CommandResult runCommand(const std::vector<std::string>& argv,
                         std::chrono::seconds timeout = std::chrono::seconds(60));

// A child whose stdout+stderr the test reads line by line.
class Child {
 public:
  explicit Child(const std::vector<std::string>& argv);
  ~Child();  // kills and reaps it if still running
  pid_t pid() const { return pid_; }
  // Waits until a line containing `needle` appeared; false at the deadline.
  bool waitForLine(const std::string& needle, std::chrono::milliseconds timeout);
  // Waits for exit; nullopt at the deadline.
  std::optional<int> wait(std::chrono::milliseconds timeout);
  const std::string& output() const { return out_; }

 private:
  void readAvailable(int timeout_ms);
  pid_t pid_ = -1;
  int fd_ = -1;
  std::string out_;
  std::optional<int> status_;
};

std::vector<std::string> namespacesWithPrefix(const std::string& prefix);
bool processAlive(pid_t pid);

// TCP from namespace `from` to `to_addr` inside namespace `to`: sends for `seconds`, returns
// the receiver's measured rate in Mbit/s (bytes over first byte..EOF); negative on failure.
double tcpRateMbps(const std::string& from, const std::string& to, const std::string& to_addr,
                   double seconds);
// One connection and a 1-byte echo, both ways; false on any failure within 5 s.
bool tcpEcho(const std::string& from, const std::string& to, const std::string& to_addr);

}  // namespace bpftrain::tools::testing
