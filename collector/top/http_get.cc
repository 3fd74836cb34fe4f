#include "collector/top/http_get.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace bpftrain::top {
namespace {

struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) close(fd);
  }
};

int remainingMs(std::chrono::steady_clock::time_point deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  return left.count() > 0 ? int(left.count()) : 0;
}

}  // namespace

std::optional<std::string> httpGet(const SocketAddress& to, const std::string& host_header,
                                   const std::string& path, std::chrono::milliseconds timeout,
                                   std::string& error) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  Fd s;
  s.fd = socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (s.fd < 0) {
    error = std::string("socket: ") + std::strerror(errno);
    return std::nullopt;
  }
  if (connect(s.fd, to.get(), to.length) != 0 && errno != EINPROGRESS) {
    error = "connect " + to.str() + ": " + std::strerror(errno);
    return std::nullopt;
  }
  pollfd p{s.fd, POLLOUT, 0};
  if (poll(&p, 1, remainingMs(deadline)) != 1) {
    error = "connect " + to.str() + ": timed out";
    return std::nullopt;
  }
  int soerr = 0;
  socklen_t len = sizeof soerr;
  getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &soerr, &len);
  if (soerr != 0) {
    error = "connect " + to.str() + ": " + std::strerror(soerr);
    return std::nullopt;
  }
  std::string req = "GET " + path + " HTTP/1.0\r\nHost: " + host_header +
                    "\r\nAccept: text/plain\r\nConnection: close\r\n\r\n";
  size_t sent = 0;
  while (sent < req.size()) {
    ssize_t n = send(s.fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += size_t(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      error = std::string("send: ") + std::strerror(errno);
      return std::nullopt;
    }
    p = {s.fd, POLLOUT, 0};
    if (poll(&p, 1, remainingMs(deadline)) != 1) {
      error = "send: timed out";
      return std::nullopt;
    }
  }
  std::string resp;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(s.fd, buf, sizeof buf, 0);
    if (n > 0) {
      resp.append(buf, size_t(n));
      continue;
    }
    if (n == 0) break;
    if (errno != EAGAIN && errno != EINTR) {
      error = std::string("recv: ") + std::strerror(errno);
      return std::nullopt;
    }
    p = {s.fd, POLLIN, 0};
    if (poll(&p, 1, remainingMs(deadline)) != 1) {
      error = "recv: timed out";
      return std::nullopt;
    }
  }
  size_t body = resp.find("\r\n\r\n");
  if (resp.compare(0, 9, "HTTP/1.1 ") != 0 && resp.compare(0, 9, "HTTP/1.0 ") != 0) {
    error = "not an HTTP response from " + to.str();
    return std::nullopt;
  }
  if (resp.compare(9, 3, "200") != 0) {
    error = "HTTP " + resp.substr(9, resp.find('\r') - 9) + " from " + to.str() + path;
    return std::nullopt;
  }
  return body == std::string::npos ? std::string() : resp.substr(body + 4);
}

}  // namespace bpftrain::top
