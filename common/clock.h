// The two clocks the project reads, declared once. Realtime is what two hosts share (control
// timestamps, telemetry step ends); monotonic is what windows and deadlines are counted in.
#pragma once

#include <time.h>

#include <cstdint>

namespace bpftrain {

// CLOCK_REALTIME in nanoseconds since the epoch.
inline uint64_t realtimeNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// CLOCK_MONOTONIC in nanoseconds (std::chrono::steady_clock's clock on Linux).
inline int64_t monotonicNowNs() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1'000'000'000 + int64_t(ts.tv_nsec);
}

}  // namespace bpftrain
