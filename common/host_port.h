// HOST:PORT, the one grammar every address flag and config key of every binary accepts:
//   IPV4:PORT      127.0.0.1:9470
//   [IPV6]:PORT    [::1]:9471 (brackets required: the port follows the last colon)
//   NAME:PORT      localhost:9472, collector-1.example:9470 (resolved when used, not when parsed)
// Parsing checks only the text; resolveHostPort() turns it into a socket address with getaddrinfo.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace bpftrain {

struct HostPort {
  std::string host;  // an IPv6 address without its brackets
  uint16_t port = 0;
  std::string str() const;  // back to the grammar: "[::1]:9471" for IPv6
  bool operator==(const HostPort&) const = default;
};

// Port 0 means "the kernel picks one": right for an address to listen on, wrong for a destination.
enum class PortZero : bool { kRejected, kAllowed };

// Nullopt on malformed text, with `error` set to a fragment the caller prefixes with the flag or
// key: `expected HOST:PORT, [IPV6]:PORT or NAME:PORT, got "x" (what is wrong)`.
std::optional<HostPort> parseHostPort(std::string_view text, PortZero zero, std::string& error);

// A resolved socket address, ready for socket(family(), ...) and bind()/connect()/sendto().
struct SocketAddress {
  sockaddr_storage storage{};
  socklen_t length = 0;
  int family() const { return storage.ss_family; }
  const sockaddr* get() const { return reinterpret_cast<const sockaddr*>(&storage); }
  uint16_t port() const;
  void setPort(uint16_t port);  // e.g. more sockets on the port the kernel picked for the first
  std::string host() const;     // numeric, without brackets
  std::string str() const;      // numeric HOST:PORT, "[::1]:9471" for IPv6
};

// Resolves `hp` for `socktype` (SOCK_DGRAM or SOCK_STREAM): the first address getaddrinfo gives.
// Numeric hosts never touch DNS. Nullopt with `error` naming the host and the fix.
std::optional<SocketAddress> resolveHostPort(const HostPort& hp, int socktype, std::string& error);

// parseHostPort() then resolveHostPort() for the value of a flag or key: errors begin with
// `flag: ` so that the user sees which setting to fix.
std::optional<SocketAddress> resolveSetting(std::string_view flag, std::string_view text,
                                            PortZero zero, int socktype, std::string& error);

// The local address a socket is bound to (e.g. to read back the port after binding port 0).
std::optional<SocketAddress> boundAddress(int fd);

}  // namespace bpftrain
