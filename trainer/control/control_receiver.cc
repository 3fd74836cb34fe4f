#include "trainer/control/control_receiver.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <stdexcept>

#include "common/wire_format.h"
#include "trainer/telemetry/emitter.h"

namespace bpftrain::trainer::control {

ControlReceiver::ControlReceiver(const std::string& host_port, Verifier& verifier)
    : verifier_(verifier), buffer_(wire::kMaxDatagramSize) {
  std::string host, error;
  uint16_t port = 0;
  if (!telemetry::parseHostPort(host_port, host, port, error))
    throw std::runtime_error("--control " + error);
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &res); rc != 0)
    throw std::runtime_error("--control " + host_port + ": " + gai_strerror(rc));
  fd_ = socket(res->ai_family, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (fd_ >= 0) setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
  if (fd_ < 0 || bind(fd_, res->ai_addr, res->ai_addrlen) != 0) {
    std::string why = std::strerror(errno);
    freeaddrinfo(res);
    if (fd_ >= 0) close(fd_);
    throw std::runtime_error("cannot listen for control decisions on " + host_port + ": " + why +
                             " (another trainer may hold it: pass --control HOST:PORT)");
  }
  freeaddrinfo(res);
  sockaddr_storage a{};
  socklen_t len = sizeof(a);
  getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
  port_ = a.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&a)->sin6_port)
                                  : ntohs(reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

ControlReceiver::~ControlReceiver() {
  if (fd_ >= 0) close(fd_);
}

bool ControlReceiver::poll(ConfigWord& decision, uint64_t& arrival_ns) {
  bool accepted = false;
  for (;;) {
    iovec iov{buffer_.data(), buffer_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (n < 0) break;  // EAGAIN: drained
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS)
        std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
    uint64_t at = uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
    timespec now{};
    clock_gettime(CLOCK_REALTIME, &now);
    uint64_t now_ns = uint64_t(now.tv_sec) * 1'000'000'000ull + uint64_t(now.tv_nsec);
    if (verifier_.verify(std::span<const uint8_t>(buffer_.data(), size_t(n)), now_ns, decision) ==
        Reject::kNone) {
      accepted = true;
      arrival_ns = at;
    }
  }
  return accepted;
}

}  // namespace bpftrain::trainer::control
