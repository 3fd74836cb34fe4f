// Control frames as the collector's controller sends them, for tests of the trainer's receiving
// side: common/control_frame.h signs them (HMAC-SHA256 over controlSigningBytes()) with a test
// secret. Link bpftrain_common.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "common/clock.h"
#include "common/control_frame.h"
#include "common/training_config.h"

namespace bpftrain::testing {

// Raw topology/pinning bytes, so tests can also send values no enum names. The frame's sequence
// is the epoch.
inline std::vector<uint8_t> signedControlFrame(std::string_view job, uint64_t epoch,
                                               uint8_t topology, uint8_t pinning,
                                               uint64_t timestamp_ns, std::string_view secret,
                                               uint64_t sender_id) {
  wire::Control c{job, epoch, topology, pinning, timestamp_ns, {}};
  std::vector<uint8_t> out(wire::kMaxFrameSize);
  out.resize(wire::encodeSignedControl(out, sender_id, uint32_t(epoch), c, secret));
  return out;
}

// A decision stamped now (CLOCK_REALTIME, the clock receivers check), from sender 1.
inline std::vector<uint8_t> signedDecision(std::string_view job, uint64_t epoch, Topology t,
                                           PinMode p, std::string_view secret) {
  return signedControlFrame(job, epoch, uint8_t(t), uint8_t(p), realtimeNowNs(), secret, 1);
}

}  // namespace bpftrain::testing
