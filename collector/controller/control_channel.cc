#include "collector/controller/control_channel.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <optional>
#include <random>

#include "common/control_frame.h"

namespace bpftrain::collector::controller {

std::unique_ptr<ControlChannel> ControlChannel::open(const std::string& address, std::string secret,
                                                     std::string job, std::string& error) {
  std::unique_ptr<ControlChannel> ch(new ControlChannel());
  // Resolved once: a decision must not wait for DNS at a step boundary.
  std::optional<SocketAddress> to =
      resolveSetting("--trainer", address, PortZero::kRejected, SOCK_DGRAM, error);
  if (!to) return nullptr;
  ch->to_ = *to;
  if (secret.empty()) {
    error =
        "controller: the control secret is empty: write one to the --secret file "
        "(e.g. head -c 32 /dev/urandom > FILE; chmod 600 FILE)";
    return nullptr;
  }
  if (!wire::isValidName(job)) {
    error = "controller: bad job name '" + job + "': a letter or _, then letters, digits, _ - .";
    return nullptr;
  }
  ch->fd_ = socket(ch->to_.family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (ch->fd_ < 0) {
    error = std::string("controller: socket: ") + std::strerror(errno);
    return nullptr;
  }
  ch->address_ = address;
  ch->secret_ = std::move(secret);
  ch->job_ = std::move(job);
  ch->sender_id_ = std::random_device{}() | uint64_t(getpid()) << 32;
  return ch;
}

ControlChannel::~ControlChannel() {
  if (fd_ >= 0) close(fd_);
}

bool ControlChannel::send(uint64_t epoch, uint8_t topology, uint8_t pinning, uint64_t timestamp_ns,
                          std::string& error) {
  wire::Control c;
  c.job = job_;
  c.epoch = epoch;
  c.topology = topology;
  c.pinning = pinning;
  c.timestamp_ns = timestamp_ns;
  std::array<uint8_t, wire::kMaxFrameSize> buf{};
  size_t n = wire::encodeSignedControl(buf, sender_id_, sequence_++, c, secret_);
  if (n == 0) {
    error = "controller: control frame did not encode";
    return false;
  }
  ssize_t sent = sendto(fd_, buf.data(), n, MSG_DONTWAIT, to_.get(), to_.length);
  if (sent != ssize_t(n)) {
    error = std::string("controller: send to ") + address_ + ": " +
            (sent < 0 ? std::strerror(errno) : "short write");
    return false;
  }
  return true;
}

}  // namespace bpftrain::collector::controller
