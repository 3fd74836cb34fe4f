#include "collector/controller/control_channel.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <random>

#include "common/hmac.h"

namespace bpftrain::collector::controller {

uint64_t wallClockNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

bool parseIpv4Address(const std::string& s, sockaddr_in& out) {
  size_t colon = s.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 >= s.size()) return false;
  std::string host = s.substr(0, colon);
  char* end = nullptr;
  long port = std::strtol(s.c_str() + colon + 1, &end, 10);
  if (*end != '\0' || port <= 0 || port > 65535) return false;
  out = sockaddr_in{};
  out.sin_family = AF_INET;
  out.sin_port = htons(uint16_t(port));
  return inet_pton(AF_INET, host.c_str(), &out.sin_addr) == 1;
}

void signControl(wire::Control& c, const std::string& secret) {
  std::array<uint8_t, wire::kMaxFrameSize> buf{};
  size_t n = wire::controlSigningBytes(buf, c);
  c.mac = hmacSha256({reinterpret_cast<const uint8_t*>(secret.data()), secret.size()},
                     std::span<const uint8_t>(buf.data(), n));
}

bool verifyControl(const wire::Control& c, const std::string& secret) {
  wire::Control expected = c;
  signControl(expected, secret);
  return macEqual(expected.mac, c.mac);
}

std::unique_ptr<ControlChannel> ControlChannel::open(const std::string& address,
                                                     std::string secret, std::string job,
                                                     std::string& error) {
  std::unique_ptr<ControlChannel> ch(new ControlChannel());
  if (!parseIpv4Address(address, ch->to_)) {
    error = "controller: bad trainer control address '" + address +
            "': expected IPv4:PORT, e.g. 127.0.0.1:9472";
    return nullptr;
  }
  if (secret.empty()) {
    error = "controller: the control secret is empty: write one to the --secret file "
            "(e.g. head -c 32 /dev/urandom > FILE; chmod 600 FILE)";
    return nullptr;
  }
  if (!wire::isValidName(job)) {
    error = "controller: bad job name '" + job + "': a letter or _, then letters, digits, _ - .";
    return nullptr;
  }
  ch->fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
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

bool ControlChannel::send(uint64_t epoch, uint8_t topology, uint8_t pinning,
                          uint64_t timestamp_ns, std::string& error) {
  wire::Control c;
  c.job = job_;
  c.epoch = epoch;
  c.topology = topology;
  c.pinning = pinning;
  c.timestamp_ns = timestamp_ns;
  signControl(c, secret_);
  std::array<uint8_t, wire::kMaxFrameSize> buf{};
  size_t n = wire::encodeControl(buf, sender_id_, sequence_++, c);
  if (n == 0) {
    error = "controller: control frame did not encode";
    return false;
  }
  ssize_t sent = sendto(fd_, buf.data(), n, MSG_DONTWAIT, reinterpret_cast<const sockaddr*>(&to_),
                        sizeof to_);
  if (sent != ssize_t(n)) {
    error = std::string("controller: send to ") + address_ + ": " +
            (sent < 0 ? std::strerror(errno) : "short write");
    return false;
  }
  return true;
}

}  // namespace bpftrain::collector::controller
