// The collector's log: one line per event on stderr, "<level> <component>: <message>", filtered
// by --log-level (changeable live on SIGHUP).
#pragma once

#include <atomic>
#include <cstdarg>
#include <optional>
#include <string_view>

#include "common/enum_names.h"

namespace bpftrain::collector::app {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

inline constexpr auto kLogLevelNames = enumNames<LogLevel>({
    {LogLevel::kDebug, "debug"},
    {LogLevel::kInfo, "info"},
    {LogLevel::kWarn, "warn"},
    {LogLevel::kError, "error"},
});
constexpr std::optional<LogLevel> parseLogLevel(std::string_view s) {
  return kLogLevelNames.parse(s);
}
constexpr std::string_view logLevelName(LogLevel l) { return kLogLevelNames.name(l, "info"); }
void setLogLevel(LogLevel l);
LogLevel logLevel();

void logf(LogLevel level, const char* component, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace bpftrain::collector::app
