// HMAC-SHA256 for controller decisions (OpenSSL at the boundary; nothing else learns of it).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace bpftrain {

using Mac = std::array<uint8_t, 32>;

Mac hmacSha256(std::span<const uint8_t> key, std::span<const uint8_t> message);

// Constant-time comparison, so that a forged MAC cannot be found byte by byte from timing.
bool macEqual(const Mac& a, const Mac& b);

// Reads a shared secret file; nullopt with `error` set when it is missing, empty or readable by
// others.
std::optional<std::string> readSecretFile(const std::string& path, std::string& error);

}  // namespace bpftrain
