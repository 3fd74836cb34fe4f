#include "common/control_frame.h"

#include <array>

namespace bpftrain::wire {
namespace {

// Job name (length byte + at most kMaxNameLength), epoch, topology, pinning, timestamp.
constexpr size_t kMaxSigningBytes = 1 + kMaxNameLength + 8 + 1 + 1 + 8;

std::span<const uint8_t> bytesOf(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

}  // namespace

std::optional<Mac> controlMac(const Control& c, std::string_view secret) {
  std::array<uint8_t, kMaxSigningBytes> signing{};
  size_t n = controlSigningBytes(signing, c);
  if (n == 0) return std::nullopt;
  return hmacSha256(bytesOf(secret), std::span<const uint8_t>(signing.data(), n));
}

bool signControl(Control& c, std::string_view secret) {
  std::optional<Mac> mac = controlMac(c, secret);
  if (!mac) return false;
  c.mac = *mac;
  return true;
}

bool verifyControl(const Control& c, std::string_view secret) {
  std::optional<Mac> mac = controlMac(c, secret);
  return mac && macEqual(*mac, c.mac);
}

size_t encodeSignedControl(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                           Control& c, std::string_view secret) {
  if (!signControl(c, secret)) return 0;
  return encodeControl(out, sender_id, sequence, c);
}

std::optional<Mac> ncclControlMac(const NcclControl& c, std::string_view secret) {
  std::array<uint8_t, 1 + kMaxNameLength + 36> signing{};
  size_t n = ncclControlSigningBytes(signing, c);
  if (n == 0) return std::nullopt;
  return hmacSha256(bytesOf(secret), std::span<const uint8_t>(signing.data(), n));
}

bool verifyNcclControl(const NcclControl& c, std::string_view secret) {
  std::optional<Mac> mac = ncclControlMac(c, secret);
  return mac && macEqual(*mac, c.mac);
}

size_t encodeSignedNcclControl(std::span<uint8_t> out, uint64_t sender_id, uint32_t sequence,
                               NcclControl& c, std::string_view secret) {
  std::optional<Mac> mac = ncclControlMac(c, secret);
  if (!mac) return 0;
  c.mac = *mac;
  return encodeNcclControl(out, sender_id, sequence, c);
}

}  // namespace bpftrain::wire
