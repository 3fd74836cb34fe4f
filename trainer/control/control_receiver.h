// Rank 0's control socket: a non-blocking UDP socket polled at each step boundary (no thread), so a
// decision is picked up at the next boundary after it arrives. Arrival times are the kernel's
// receive timestamps (SO_TIMESTAMPNS), which is what switch latency is measured from.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trainer/control/verifier.h"

namespace bpftrain::trainer::control {

class ControlReceiver {
 public:
  // Binds HOST:PORT (port 0: an ephemeral port, see port()). Throws std::runtime_error naming
  // the fix (address in use: another trainer holds it, pass --control HOST:PORT).
  ControlReceiver(const std::string& host_port, Verifier& verifier);
  ~ControlReceiver();
  ControlReceiver(const ControlReceiver&) = delete;
  ControlReceiver& operator=(const ControlReceiver&) = delete;

  // Reads every pending datagram; true if one carried a newly accepted decision (the newest wins),
  // with its kernel arrival time (CLOCK_REALTIME ns).
  bool poll(ConfigWord& decision, uint64_t& arrival_realtime_ns);
  uint16_t port() const { return port_; }

 private:
  Verifier& verifier_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::vector<uint8_t> buffer_;
};

}  // namespace bpftrain::trainer::control
