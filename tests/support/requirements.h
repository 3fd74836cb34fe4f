// What a test needs from the machine, and whether not having it is a skip or a failure.
// Only absent hardware (a PMU, a GPU, a second NUMA node, a second CPU) is a skip everywhere.
// A missing tool is always a failure: tools/setup installs every tool the tests use. A missing
// privilege or an unusable facility (network namespaces, runuser) is a skip on a developer's
// machine and a failure under CI (CI=true), which runs tools/setup and runs as root.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <string>
#include <string_view>

namespace bpftrain::testing {

inline bool underCi() {
  const char* ci = ::getenv("CI");
  return ci != nullptr && (std::string_view(ci) == "true" || std::string_view(ci) == "1");
}

// True when `tool` is an executable file in one of $PATH's directories.
inline bool haveTool(const std::string& tool) {
  const char* path = ::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    const size_t colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (dir.empty()) dir.assign(1, '.');  // an empty PATH entry is the current directory
    if (::access((dir + "/" + tool).c_str(), X_OK) == 0) return true;
  }
  return false;
}

}  // namespace bpftrain::testing

// Fails the test when `tool` is not on PATH (tools/setup installs it).
#define BPFTRAIN_REQUIRE_TOOL(tool)                                            \
  do {                                                                         \
    if (!::bpftrain::testing::haveTool(tool))                                  \
      GTEST_FAIL() << "`" << (tool) << "` not found on PATH: run tools/setup"; \
  } while (0)

// Skips the test outside CI and fails it under CI, with `why` (a streamable message).
#define BPFTRAIN_SKIP_OR_FAIL_UNDER_CI(why)                                  \
  do {                                                                       \
    if (::bpftrain::testing::underCi()) GTEST_FAIL() << "under CI: " << why; \
    GTEST_SKIP() << why;                                                     \
  } while (0)

// Skips (outside CI) or fails (under CI, which runs as root) a test that needs root.
#define BPFTRAIN_REQUIRE_ROOT(why)                                               \
  do {                                                                           \
    if (::geteuid() != 0) BPFTRAIN_SKIP_OR_FAIL_UNDER_CI("needs root: " << why); \
  } while (0)
