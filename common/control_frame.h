// Signing and checking controller decisions: HMAC-SHA256 under the shared secret over exactly
// controlSigningBytes() (docs/wire-format.md, kind 4: the body without the MAC). The controller's
// control channel, the trainer's verifier and the tests all sign and check through these.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "common/hmac.h"
#include "common/wire_format.h"

namespace bpftrain::wire {

// The MAC of `c` under `secret`; nullopt when c does not encode (job name too long or invalid).
std::optional<Mac> controlMac(const Control& c, std::string_view secret);

// Fills c.mac; false (c.mac untouched) when c does not encode.
bool signControl(Control& c, std::string_view secret);

// True when c.mac is the MAC of c under `secret`, compared in constant time.
bool verifyControl(const Control& c, std::string_view secret);

// Signs `c` and encodes it as one kControl frame; bytes written, 0 when it does not fit or encode.
size_t encodeSignedControl(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                           Control& c, std::string_view secret);

// The same for NCCL tuner decisions (kind 6): MAC over exactly ncclControlSigningBytes().
std::optional<Mac> ncclControlMac(const NcclControl& c, std::string_view secret);
bool verifyNcclControl(const NcclControl& c, std::string_view secret);
size_t encodeSignedNcclControl(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                               NcclControl& c, std::string_view secret);

}  // namespace bpftrain::wire
