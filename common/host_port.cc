#include "common/host_port.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>

#include <algorithm>
#include <charconv>
#include <cstring>

namespace bpftrain {
namespace {

bool isDigit(char c) { return c >= '0' && c <= '9'; }

bool isNameChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

// `text` with control bytes spelled \xNN, so that an error naming it stays one line.
std::string printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (u >= 0x20 && u != 0x7f) {
      out += c;
      continue;
    }
    static constexpr char kHex[] = "0123456789abcdef";
    out += {'\\', 'x', kHex[u >> 4], kHex[u & 15]};
  }
  return out;
}

}  // namespace

std::string HostPort::str() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::optional<HostPort> parseHostPort(std::string_view text, PortZero zero, std::string& error) {
  auto fail = [&](const char* why) -> std::optional<HostPort> {
    error = "expected HOST:PORT, [IPV6]:PORT or NAME:PORT, got \"" + printable(text) + "\" (" +
            why + ")";
    return std::nullopt;
  };
  std::string_view host, port;
  bool bracketed = false;
  if (!text.empty() && text.front() == '[') {
    size_t close = text.find(']');
    if (close == std::string_view::npos) return fail("no ']' after the IPv6 address");
    host = text.substr(1, close - 1);
    std::string_view rest = text.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return fail("no :PORT after the ']'");
    port = rest.substr(1);
    bracketed = true;
  } else {
    size_t colon = text.rfind(':');
    if (colon == std::string_view::npos) return fail("no :PORT");
    host = text.substr(0, colon);
    port = text.substr(colon + 1);
    if (host.find(':') != std::string_view::npos)
      return fail("an IPv6 address goes in brackets, e.g. [::1]:9470");
  }
  if (host.empty()) return fail("no host before the port, e.g. 127.0.0.1:9470");
  if (port.empty()) return fail("no port after the ':'");
  unsigned value = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (!isDigit(port.front()) || end != port.data() + port.size() ||
      (ec != std::errc() && ec != std::errc::result_out_of_range))
    return fail("the port is not a number");
  if (ec == std::errc::result_out_of_range || value > 65535)
    return fail("the port must be 0..65535");
  if (value == 0 && zero == PortZero::kRejected)
    return fail("port 0 is for addresses to listen on; give the port to send to");

  HostPort hp{std::string(host), uint16_t(value)};
  if (bracketed) {
    in6_addr a6;
    if (inet_pton(AF_INET6, hp.host.c_str(), &a6) != 1) return fail("not an IPv6 address");
    return hp;
  }
  // Digits and dots only must be a dotted quad: getaddrinfo would read "10.1" as 10.0.0.1.
  if (std::all_of(host.begin(), host.end(), [](char c) { return c == '.' || isDigit(c); })) {
    in_addr a4;
    if (inet_pton(AF_INET, hp.host.c_str(), &a4) != 1) return fail("not an IPv4 address");
    return hp;
  }
  if (!std::all_of(host.begin(), host.end(), isNameChar) || host.front() == '-' ||
      host.front() == '.')
    return fail("a host name has letters, digits, '-', '_' and '.' only");
  return hp;
}

uint16_t SocketAddress::port() const {
  if (family() == AF_INET6)
    return ntohs(reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_port);
  return ntohs(reinterpret_cast<const sockaddr_in*>(&storage)->sin_port);
}

void SocketAddress::setPort(uint16_t port) {
  if (family() == AF_INET6)
    reinterpret_cast<sockaddr_in6*>(&storage)->sin6_port = htons(port);
  else
    reinterpret_cast<sockaddr_in*>(&storage)->sin_port = htons(port);
}

std::string SocketAddress::host() const {
  char text[INET6_ADDRSTRLEN] = {};
  if (family() == AF_INET6)
    inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(&storage)->sin6_addr, text,
              sizeof text);
  else
    inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(&storage)->sin_addr, text,
              sizeof text);
  return text;
}

std::string SocketAddress::str() const { return HostPort{host(), port()}.str(); }

std::optional<SocketAddress> resolveHostPort(const HostPort& hp, int socktype, std::string& error) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = socktype;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string port = std::to_string(hp.port);
  if (int rc = getaddrinfo(hp.host.c_str(), port.c_str(), &hints, &res); rc != 0 || !res) {
    error = "cannot resolve \"" + hp.host + "\": " + (rc != 0 ? gai_strerror(rc) : "no address") +
            " (use a numeric address such as 127.0.0.1 or a name this host resolves)";
    return std::nullopt;
  }
  SocketAddress out;
  std::memcpy(&out.storage, res->ai_addr, std::min<size_t>(res->ai_addrlen, sizeof out.storage));
  out.length = socklen_t(res->ai_addrlen);
  freeaddrinfo(res);
  return out;
}

std::optional<SocketAddress> boundAddress(int fd) {
  SocketAddress out;
  out.length = sizeof out.storage;
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&out.storage), &out.length) != 0)
    return std::nullopt;
  return out;
}

std::optional<SocketAddress> resolveSetting(std::string_view flag, std::string_view text,
                                            PortZero zero, int socktype, std::string& error) {
  std::optional<SocketAddress> out;
  if (std::optional<HostPort> hp = parseHostPort(text, zero, error))
    out = resolveHostPort(*hp, socktype, error);
  if (!out) error = std::string(flag) + ": " + error;
  return out;
}

}  // namespace bpftrain
