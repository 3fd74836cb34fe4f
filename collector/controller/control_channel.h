// The controller's side of the control port: signs decisions with HMAC-SHA256 over
// wire::controlSigningBytes() and sends them as kControl frames to the trainer's rank 0 over UDP.
// Non-blocking: a full socket is a failed send that the service retries at the next step.
#pragma once

#include <netinet/in.h>

#include <cstdint>
#include <memory>
#include <string>

#include "common/wire_format.h"

namespace bpftrain::collector::controller {

// Wall clock (CLOCK_REALTIME) in nanoseconds: the trainer checks control timestamps against its
// own wall clock, which is the clock two hosts share.
uint64_t wallClockNs();

class ControlChannel {
 public:
  // `address` is "IPv4:PORT". nullptr with `error` naming the fix on a bad address or secret.
  static std::unique_ptr<ControlChannel> open(const std::string& address, std::string secret,
                                              std::string job, std::string& error);
  ~ControlChannel();
  ControlChannel(const ControlChannel&) = delete;
  ControlChannel& operator=(const ControlChannel&) = delete;

  // Signs and sends one decision; false with `error` set when the datagram did not leave.
  bool send(uint64_t epoch, uint8_t topology, uint8_t pinning, uint64_t timestamp_ns,
            std::string& error);
  const std::string& address() const { return address_; }

 private:
  ControlChannel() = default;
  int fd_ = -1;
  sockaddr_in to_{};
  std::string address_;
  std::string secret_;
  std::string job_;
  uint64_t sender_id_ = 0;
  uint32_t sequence_ = 0;
};

// Fills c.mac for `secret` (shared with the trainer's verifier and the tests' fake trainer).
void signControl(wire::Control& c, const std::string& secret);
// True when c.mac is the HMAC of c's signing bytes under `secret`.
bool verifyControl(const wire::Control& c, const std::string& secret);

// "HOST:PORT" with a numeric IPv4 host; false on anything else.
bool parseIpv4Address(const std::string& s, sockaddr_in& out);

}  // namespace bpftrain::collector::controller
