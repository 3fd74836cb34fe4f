// The collector's log: one line per event on stderr, "<level> <component>: <message>", filtered
// by --log-level (changeable live on SIGHUP).
#pragma once

#include <atomic>
#include <cstdarg>
#include <optional>
#include <string_view>

namespace bpftrain::collector::app {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

std::optional<LogLevel> parseLogLevel(std::string_view s);
std::string_view logLevelName(LogLevel l);
void setLogLevel(LogLevel l);
LogLevel logLevel();

void logf(LogLevel level, const char* component, const char* fmt, ...)
    __attribute__((format(printf, 3, 4)));

}  // namespace bpftrain::collector::app
