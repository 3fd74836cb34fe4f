#include "collector/app/log.h"

#include <cstdio>
#include <ctime>

namespace bpftrain::collector::app {
namespace {
std::atomic<int> g_level{int(LogLevel::kInfo)};
}  // namespace

std::optional<LogLevel> parseLogLevel(std::string_view s) {
  for (LogLevel l : {LogLevel::kDebug, LogLevel::kInfo, LogLevel::kWarn, LogLevel::kError})
    if (logLevelName(l) == s) return l;
  return std::nullopt;
}

std::string_view logLevelName(LogLevel l) {
  switch (l) {
    case LogLevel::kDebug:
      return "debug";
    case LogLevel::kInfo:
      return "info";
    case LogLevel::kWarn:
      return "warn";
    case LogLevel::kError:
      return "error";
  }
  return "info";
}

void setLogLevel(LogLevel l) { g_level.store(int(l)); }
LogLevel logLevel() { return LogLevel(g_level.load()); }

void logf(LogLevel level, const char* component, const char* fmt, ...) {
  if (int(level) < g_level.load(std::memory_order_relaxed)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  tm t;
  gmtime_r(&ts.tv_sec, &t);
  // One fprintf per line so concurrent threads do not interleave within a line.
  std::fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: %s\n", t.tm_year + 1900,
               t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, ts.tv_nsec / 1'000'000,
               logLevelName(level).data(), component, msg);
}

}  // namespace bpftrain::collector::app
