#include "trainer/control/control_receiver.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "common/clock.h"
#include "common/host_port.h"
#include "common/wire_format.h"

namespace bpftrain::trainer::control {

ControlReceiver::ControlReceiver(const std::string& host_port, Verifier& verifier)
    : verifier_(verifier), buffer_(wire::kMaxDatagramSize) {
  std::string error;
  std::optional<SocketAddress> addr =
      resolveSetting("--control", host_port, PortZero::kAllowed, SOCK_DGRAM, error);
  if (!addr) throw std::runtime_error(error);
  fd_ = socket(addr->family(), SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  int one = 1;
  if (fd_ >= 0) {
    setsockopt(fd_, SOL_SOCKET, SO_TIMESTAMPNS, &one, sizeof(one));
    setsockopt(fd_, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof(one));
  }
  if (fd_ < 0 || bind(fd_, addr->get(), addr->length) != 0) {
    std::string why = std::strerror(errno);
    if (fd_ >= 0) close(fd_);
    throw std::runtime_error("cannot listen for control decisions on " + host_port + ": " + why +
                             " (another trainer may hold it: pass --control HOST:PORT)");
  }
  port_ = boundAddress(fd_).value_or(*addr).port();
}

ControlReceiver::~ControlReceiver() {
  if (fd_ >= 0) close(fd_);
}

bool ControlReceiver::poll(ConfigWord& decision, uint64_t& arrival_ns) {
  bool accepted = false;
  for (int i = 0; i < kMaxDatagramsPerPoll; ++i) {
    iovec iov{buffer_.data(), buffer_.size()};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec)) + CMSG_SPACE(sizeof(uint32_t))];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t n = recvmsg(fd_, &msg, MSG_DONTWAIT);
    if (n < 0) break;               // EAGAIN: drained
    uint64_t at = realtimeNowNs();  // unless the kernel stamped the arrival
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec ts{};
        std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
        at = uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
      } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
        uint32_t drops = 0;  // the socket's cumulative count, 32 bits wide: follow its wraps
        std::memcpy(&drops, CMSG_DATA(c), sizeof(drops));
        kernel_drops_ += uint32_t(drops - uint32_t(kernel_drops_));
      }
    }
    const uint64_t now_ns = realtimeNowNs();
    if (verifier_.verify(std::span<const uint8_t>(buffer_.data(), size_t(n)), now_ns, decision) ==
        Reject::kNone) {
      accepted = true;
      arrival_ns = at;
    }
  }
  return accepted;
}

}  // namespace bpftrain::trainer::control
