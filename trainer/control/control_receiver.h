// Rank 0's control socket: a non-blocking UDP socket polled at each step boundary (no thread), so a
// decision is picked up at the next boundary after it arrives. Arrival times are the kernel's
// receive timestamps (SO_TIMESTAMPNS), which is what switch latency is measured from.
// A flood (garbage, forged or replayed frames) must not hold a step boundary: one poll reads at
// most kMaxDatagramsPerPoll datagrams and leaves the rest for the next boundary; what the socket
// buffer cannot hold meanwhile the kernel drops, and SO_RXQ_OVFL counts it (kernelDrops()). The
// controller re-sends a decision until it sees it applied, so a dropped one comes again.
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
  // Datagrams the kernel dropped at this socket since it was opened, as of the last datagram
  // read (SO_RXQ_OVFL rides on received datagrams).
  uint64_t kernelDrops() const { return kernel_drops_; }

  // A controller sends a few frames a second. 32 datagrams cost a boundary some 50 us to read and
  // refuse (a step here takes 0.4 ms at the least); a flood beyond 32 per step ends in kernel
  // drops, counted.
  static constexpr int kMaxDatagramsPerPoll = 32;

 private:
  Verifier& verifier_;
  int fd_ = -1;
  uint16_t port_ = 0;
  uint64_t kernel_drops_ = 0;
  std::vector<uint8_t> buffer_;
};

}  // namespace bpftrain::trainer::control
