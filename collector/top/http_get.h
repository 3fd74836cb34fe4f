// A plain HTTP/1.0 GET with a deadline, for reading a collector's /metrics (no TLS, no redirects:
// the collector serves plain HTTP on its --metrics address).
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "common/host_port.h"

namespace bpftrain::top {

// The body of a 200 response, or nullopt with `error` saying what failed (connect, status, time).
std::optional<std::string> httpGet(const SocketAddress& to, const std::string& host_header,
                                   const std::string& path, std::chrono::milliseconds timeout,
                                   std::string& error);

}  // namespace bpftrain::top
