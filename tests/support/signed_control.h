// Control frames as the collector's controller sends them, for tests of the trainer's receiving
// side: a kControl frame HMAC-SHA256-signed over controlSigningBytes() with a test secret.
// Link bpftrain_common.
#pragma once

#include <cstdint>
#include <ctime>
#include <span>
#include <string_view>
#include <vector>

#include "common/hmac.h"
#include "common/training_config.h"
#include "common/wire_format.h"

namespace bpftrain::testing {

// Wall-clock time in ns (CLOCK_REALTIME): the clock control timestamps are checked against.
inline uint64_t nowNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// Raw topology/pinning bytes, so tests can also send values no enum names. The frame's sequence
// is the epoch.
inline std::vector<uint8_t> signedControlFrame(std::string_view job, uint64_t epoch,
                                               uint8_t topology, uint8_t pinning,
                                               uint64_t timestamp_ns, std::string_view secret,
                                               uint64_t sender_id) {
  wire::Control c;
  c.job = job;
  c.epoch = epoch;
  c.topology = topology;
  c.pinning = pinning;
  c.timestamp_ns = timestamp_ns;
  uint8_t signing[512];
  size_t n = wire::controlSigningBytes(signing, c);
  c.mac = hmacSha256(std::span(reinterpret_cast<const uint8_t*>(secret.data()), secret.size()),
                     std::span<const uint8_t>(signing, n));
  std::vector<uint8_t> out(wire::kMaxFrameSize);
  out.resize(wire::encodeControl(out, sender_id, uint32_t(epoch), c));
  return out;
}

// A decision stamped now, from sender 1.
inline std::vector<uint8_t> signedDecision(std::string_view job, uint64_t epoch, Topology t,
                                           PinMode p, std::string_view secret) {
  return signedControlFrame(job, epoch, uint8_t(t), uint8_t(p), nowNs(), secret, 1);
}

}  // namespace bpftrain::testing
