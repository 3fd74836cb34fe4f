// The controller's side of the control port: signs decisions (common/control_frame.h: HMAC-SHA256
// over wire::controlSigningBytes()) and sends them as kControl frames to the trainer's rank 0 over
// UDP.
// Non-blocking: a full socket is a failed send that the service retries at the next step.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "common/host_port.h"
#include "common/wire_format.h"

namespace bpftrain::collector::controller {

class ControlChannel {
 public:
  // `address` is HOST:PORT, [IPV6]:PORT or NAME:PORT (common/host_port.h), resolved here once.
  // nullptr with `error` naming the fix on a bad address or secret.
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
  SocketAddress to_;
  std::string address_;
  std::string secret_;
  std::string job_;
  uint64_t sender_id_ = 0;
  uint32_t sequence_ = 0;
};

}  // namespace bpftrain::collector::controller
