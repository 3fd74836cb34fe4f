#include "collector/loader/libbpf_check.h"

#include <bpf/libbpf.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>

namespace bpftrain::collector::loader {
namespace {

// libbpf's own messages (verifier logs, "failed to find USDT notes", ...) are kept, not printed:
// the last warning becomes part of a failed check's message.
std::mutex g_libbpf_mutex;
std::string g_libbpf_last;

int libbpfPrint(enum libbpf_print_level level, const char* format, va_list args) {
  static const bool verbose = std::getenv("BPFTRAIN_LIBBPF_DEBUG") != nullptr;
  if (verbose) {
    va_list copy;
    va_copy(copy, args);
    std::vfprintf(stderr, format, copy);
    va_end(copy);
  }
  if (level == LIBBPF_DEBUG) return 0;
  char line[512];
  std::vsnprintf(line, sizeof(line), format, args);
  std::lock_guard lock(g_libbpf_mutex);
  g_libbpf_last = line;
  while (!g_libbpf_last.empty() && g_libbpf_last.back() == '\n') g_libbpf_last.pop_back();
  return 0;
}

}  // namespace

std::string Status::where() const {
  const char* file = where_.file_name();
  if (const char* slash = std::strrchr(file, '/')) file = slash + 1;
  return std::string(file) + ":" + std::to_string(where_.line());
}

void captureLibbpfMessages() { libbpf_set_print(libbpfPrint); }

std::string takeLibbpfMessage() {
  std::lock_guard lock(g_libbpf_mutex);
  return std::exchange(g_libbpf_last, {});
}

std::string errnoText(int err) { return std::strerror(err < 0 ? -err : err); }

Status failedCall(std::string_view what, int err, SourceLocation where) {
  const std::string detail = takeLibbpfMessage();
  return Status::error(std::string(what) + ": " + errnoText(err) +
                           (detail.empty() ? "" : " (" + detail + ")"),
                       where)
      .withErrno(err < 0 ? -err : err);
}

}  // namespace bpftrain::collector::loader
