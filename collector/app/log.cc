#include "collector/app/log.h"

#include <cstdio>
#include <ctime>

#include "common/clock.h"

namespace bpftrain::collector::app {
namespace {
std::atomic<int> g_level{int(LogLevel::kInfo)};
}  // namespace

void setLogLevel(LogLevel l) { g_level.store(int(l)); }
LogLevel logLevel() { return LogLevel(g_level.load()); }

void logf(LogLevel level, const char* component, const char* fmt, ...) {
  if (int(level) < g_level.load(std::memory_order_relaxed)) return;
  char msg[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const uint64_t now_ns = realtimeNowNs();
  const time_t sec = time_t(now_ns / 1'000'000'000);
  tm t;
  gmtime_r(&sec, &t);
  // One fprintf per line so concurrent threads do not interleave within a line.
  std::fprintf(stderr, "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %s %s: %s\n", t.tm_year + 1900,
               t.tm_mon + 1, t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec,
               long(now_ns % 1'000'000'000 / 1'000'000), logLevelName(level).data(), component,
               msg);
}

}  // namespace bpftrain::collector::app
