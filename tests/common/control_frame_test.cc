#include "common/control_frame.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdlib>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace bpftrain::wire {
namespace {

std::vector<uint8_t> fromHex(const std::string& hex) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(uint8_t(std::stoul(hex.substr(i, 2), nullptr, 16)));
  return out;
}

std::string toHex(std::span<const uint8_t> b) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (uint8_t x : b) {
    s += d[x >> 4];
    s += d[x & 15];
  }
  return s;
}

// The golden control frame of docs/wire-format.md (its MAC is a placeholder).
std::vector<uint8_t> goldenControlFrame() {
  const char* src = std::getenv("BPFTRAIN_SOURCE_DIR");
  std::ifstream in(std::string(src ? src : ".") + "/tests/common/golden/wire_v1.txt");
  std::string name, hex;
  while (in >> name >> hex)
    if (name == "control") return fromHex(hex);
  return {};
}

constexpr std::string_view kSecret = "bpftrain-test-secret";
// HMAC-SHA256 under kSecret over the golden frame's body without its MAC, computed outside this
// code with: echo -n 066469676974730500000000000000020115cd5b0700000000 | xxd -r -p |
//   openssl dgst -sha256 -mac HMAC -macopt key:bpftrain-test-secret   (Python's hmac agrees).
constexpr const char* kGoldenMac =
    "98340cb6d1da815c6523affe97c3c20e5e0d4e4a4d28a259f9ce94dd348c08ad";

Control goldenControl() { return Control{"digits", 5, 2, 1, 123456789, {}}; }

TEST(ControlFrame, KnownAnswerOverTheGoldenFramesSignedBytes) {
  const std::vector<uint8_t> golden = goldenControlFrame();
  ASSERT_EQ(golden.size(), 81u) << "tests/common/golden/wire_v1.txt has no control vector";
  // The MAC covers exactly the body bytes before it, as the wire format says.
  std::array<uint8_t, kMaxFrameSize> signing{};
  size_t n = controlSigningBytes(signing, goldenControl());
  ASSERT_EQ(n, golden.size() - kHeaderSize - 32);
  EXPECT_EQ(toHex({signing.data(), n}), toHex({golden.data() + kHeaderSize, n}));

  Control c = goldenControl();
  ASSERT_TRUE(signControl(c, kSecret));
  EXPECT_EQ(toHex(c.mac), kGoldenMac);
  EXPECT_TRUE(verifyControl(c, kSecret));

  // The signed frame is the golden frame with the placeholder replaced by the real MAC.
  Control e = goldenControl();
  std::array<uint8_t, kMaxFrameSize> frame{};
  size_t len = encodeSignedControl(frame, 9, 11, e, kSecret);
  ASSERT_EQ(len, golden.size());
  std::vector<uint8_t> want = golden;
  std::vector<uint8_t> mac = fromHex(kGoldenMac);
  std::copy(mac.begin(), mac.end(), want.end() - 32);
  EXPECT_EQ(toHex({frame.data(), len}), toHex(want));
}

TEST(ControlFrame, EveryTamperedByteIsRejected) {
  Control c = goldenControl();
  std::array<uint8_t, kMaxFrameSize> buf{};
  const size_t len = encodeSignedControl(buf, 9, 11, c, kSecret);
  ASSERT_GT(len, kHeaderSize);
  auto verifies = [](std::span<const uint8_t> bytes) {
    FrameView frame;
    Control d;
    return nextFrame(bytes, frame) == DecodeError::kNone &&
           decodeControl(frame, d) == DecodeError::kNone && verifyControl(d, kSecret);
  };
  ASSERT_TRUE(verifies({buf.data(), len}));
  // Any flipped bit in the body (signed bytes or MAC) fails: decoding or the MAC rejects it.
  size_t checked = 0;
  for (size_t i = kHeaderSize; i < len; ++i) {
    std::array<uint8_t, kMaxFrameSize> bad = buf;
    bad[i] ^= 0x01;
    EXPECT_FALSE(verifies({bad.data(), len})) << "byte " << i;
    ++checked;
  }
  EXPECT_EQ(checked, len - kHeaderSize);
}

TEST(ControlFrame, WrongSecretOrAlteredFieldDoesNotVerify) {
  Control c{"j", 5, 3, 0, 123, {}};
  ASSERT_TRUE(signControl(c, kSecret));
  EXPECT_TRUE(verifyControl(c, kSecret));
  EXPECT_FALSE(verifyControl(c, "another secret"));
  for (auto alter : {+[](Control& x) { ++x.epoch; }, +[](Control& x) { x.topology = 1; },
                     +[](Control& x) { x.pinning = 2; }, +[](Control& x) { ++x.timestamp_ns; },
                     +[](Control& x) { x.job = "k"; }}) {
    Control altered = c;
    alter(altered);
    EXPECT_FALSE(verifyControl(altered, kSecret));
  }
}

TEST(ControlFrame, AJobThatDoesNotEncodeIsNeitherSignedNorVerified) {
  std::string long_job(kMaxNameLength + 1, 'j');
  Control c{long_job, 1, 0, 0, 1, {}};
  EXPECT_FALSE(signControl(c, kSecret));
  EXPECT_FALSE(verifyControl(c, kSecret));  // an all-zero MAC never matches
  std::array<uint8_t, kMaxFrameSize> buf{};
  EXPECT_EQ(encodeSignedControl(buf, 1, 1, c, kSecret), 0u);
}

}  // namespace
}  // namespace bpftrain::wire
