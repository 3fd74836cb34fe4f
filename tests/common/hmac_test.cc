#include "common/hmac.h"

#include <gtest/gtest.h>

#include <string_view>

namespace bpftrain {
namespace {

std::span<const uint8_t> bytes(std::string_view s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

TEST(Hmac, Rfc4231TestCase2) {
  Mac mac = hmacSha256(bytes("Jefe"), bytes("what do ya want for nothing?"));
  static const uint8_t expected[] = {0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e,
                                     0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
                                     0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83,
                                     0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};
  Mac want{};
  std::copy(std::begin(expected), std::end(expected), want.begin());
  EXPECT_TRUE(macEqual(mac, want));
  want[31] ^= 1;
  EXPECT_FALSE(macEqual(mac, want));
}

TEST(Hmac, SecretFileErrorsNameTheFix) {
  std::string error;
  EXPECT_FALSE(readSecretFile("/nonexistent/secret", error));
  EXPECT_NE(error.find("head -c 32 /dev/urandom"), std::string::npos);
}

}  // namespace
}  // namespace bpftrain
