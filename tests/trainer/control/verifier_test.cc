#include "trainer/control/verifier.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <random>
#include <thread>

#include "common/clock.h"
#include "common/wire_format.h"
#include "tests/support/signed_control.h"
#include "trainer/control/control_receiver.h"

namespace bpftrain::trainer::control {
namespace {

constexpr std::string_view kSecret = "s3cret-for-tests";

// What the controller sends: a kControl frame signed over controlSigningBytes().
std::vector<uint8_t> signedFrame(std::string_view job, uint64_t epoch, uint8_t topo, uint8_t pin,
                                 uint64_t ts, std::string_view secret = kSecret) {
  return testing::signedControlFrame(job, epoch, topo, pin, ts, secret, 9);
}

TEST(Verifier, AcceptsAValidDecision) {
  Verifier v("job", std::string(kSecret), 0);
  ConfigWord w;
  ASSERT_EQ(v.verify(signedFrame("job", 1, 1, 2, realtimeNowNs()), realtimeNowNs(), w),
            Reject::kNone);
  EXPECT_EQ(w, (ConfigWord{1, Topology::kHalvingDoubling, PinMode::kSpread}));
  EXPECT_EQ(v.accepted(), 1u);
  EXPECT_EQ(v.newestEpoch(), 1u);
}

TEST(Verifier, RejectsAndCountsEachKindOfBadDecision) {
  Verifier v("job", std::string(kSecret), 5);
  ConfigWord w;
  const uint64_t now = realtimeNowNs();
  EXPECT_EQ(v.verify(signedFrame("job", 4, 0, 0, now), now, w), Reject::kStaleEpoch);
  EXPECT_EQ(v.verify(signedFrame("job", 5, 0, 0, now), now, w), Reject::kStaleEpoch);
  EXPECT_EQ(v.verify(signedFrame("other", 6, 0, 0, now), now, w), Reject::kWrongJob);
  EXPECT_EQ(v.verify(signedFrame("job", 6, 0, 0, now, "wrong-secret"), now, w), Reject::kBadMac);
  EXPECT_EQ(v.verify(signedFrame("job", 6, 0, 0, now - 31'000'000'000ull), now, w),
            Reject::kClockSkew);
  EXPECT_EQ(v.verify(signedFrame("job", 6, 0, 0, now + 31'000'000'000ull), now, w),
            Reject::kClockSkew);
  EXPECT_EQ(v.verify(signedFrame("job", 6, 7, 0, now), now, w), Reject::kUnknownValue);
  EXPECT_EQ(v.verify(signedFrame("job", 7, 0, 9, now), now, w), Reject::kUnknownValue);
  // A tampered field breaks the MAC.
  auto tampered = signedFrame("job", 6, 0, 0, now);
  tampered[wire::kHeaderSize + 1 + 3 + 8] ^= 1;  // the topology byte after job and epoch
  EXPECT_EQ(v.verify(tampered, now, w), Reject::kBadMac);
  std::vector<uint8_t> junk{1, 2, 3};
  EXPECT_EQ(v.verify(junk, now, w), Reject::kMalformed);
  // Accept one, then its replay is rejected, as is a replay of a stale one.
  auto good = signedFrame("job", 8, 3, 3, now);
  EXPECT_EQ(v.verify(good, now, w), Reject::kNone);
  EXPECT_EQ(v.verify(good, now, w), Reject::kReplay);
  EXPECT_EQ(v.rejected(Reject::kStaleEpoch), 2u);
  EXPECT_EQ(v.rejected(Reject::kWrongJob), 1u);
  EXPECT_EQ(v.rejected(Reject::kBadMac), 2u);
  EXPECT_EQ(v.rejected(Reject::kClockSkew), 2u);
  EXPECT_EQ(v.rejected(Reject::kUnknownValue), 2u);
  EXPECT_EQ(v.rejected(Reject::kMalformed), 1u);
  EXPECT_EQ(v.rejected(Reject::kReplay), 1u);
  EXPECT_EQ(v.rejectedTotal(), 11u);
  EXPECT_EQ(v.accepted(), 1u);
  EXPECT_EQ(w.epoch, 8u);
}

TEST(Verifier, ControllerResendsOfTheAcceptedDecisionAreNotRejections) {
  Verifier v("job", std::string(kSecret), 0);
  ConfigWord w;
  const uint64_t now = realtimeNowNs();
  ASSERT_EQ(v.verify(signedFrame("job", 1, 2, 0, now), now, w), Reject::kNone);
  // The controller repeats epoch 1 (new timestamp, so a new MAC) until telemetry shows it applied.
  EXPECT_EQ(v.verify(signedFrame("job", 1, 2, 0, now + 1000), now, w), Reject::kStaleEpoch);
  EXPECT_EQ(v.verify(signedFrame("job", 1, 2, 0, now + 2000), now, w), Reject::kStaleEpoch);
  EXPECT_EQ(v.duplicates(), 2u);
  EXPECT_EQ(v.rejectedTotal(), 0u);
  // The same epoch with other values is not a resend: stale, counted.
  EXPECT_EQ(v.verify(signedFrame("job", 1, 3, 0, now + 3000), now, w), Reject::kStaleEpoch);
  EXPECT_EQ(v.rejected(Reject::kStaleEpoch), 1u);
}

TEST(ControlReceiver, ReceivesOverUdpWithArrivalTime) {
  Verifier v("job", std::string(kSecret), 0);
  ControlReceiver rx("127.0.0.1:0", v);
  ASSERT_NE(rx.port(), 0);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(rx.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const uint64_t sent = realtimeNowNs();
  auto forged = signedFrame("job", 3, 2, 1, sent, "forged");
  auto good = signedFrame("job", 2, 2, 1, sent);
  sendto(fd, forged.data(), forged.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  sendto(fd, good.data(), good.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ConfigWord w;
  uint64_t arrival = 0;
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  bool got = false;
  while (!got && std::chrono::steady_clock::now() < deadline) {
    got = rx.poll(w, arrival);
    if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  close(fd);
  ASSERT_TRUE(got);
  EXPECT_EQ(w, (ConfigWord{2, Topology::kBcube, PinMode::kCompact}));
  EXPECT_GE(arrival, sent);
  EXPECT_EQ(v.rejected(Reject::kBadMac), 1u);
}

// Fault: the control port flooded with garbage, forgeries and replays of an accepted decision.
// Every datagram is counted by what it was, each poll (a step boundary) stays short, and the
// genuine new decision sent last is still accepted.
TEST(ControlReceiver, AFloodOfGarbageAndReplaysIsCountedAndAGenuineDecisionStillLands) {
  Verifier v("job", std::string(kSecret), 0);
  ControlReceiver rx("127.0.0.1:0", v);
  ASSERT_NE(rx.port(), 0);
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(rx.port());
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  auto send = [&](const std::vector<uint8_t>& d) {
    ASSERT_EQ(sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a),
              ssize_t(d.size()));
  };
  ConfigWord w;
  uint64_t arrival = 0;
  // Polls until `n` more datagrams were counted (or a deadline); returns the longest poll.
  uint64_t counted = 0;
  auto drain = [&](uint64_t n, bool& accepted) {
    std::chrono::nanoseconds longest{0};
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
    while (v.accepted() + v.rejectedTotal() + v.duplicates() < counted + n &&
           std::chrono::steady_clock::now() < deadline) {
      const auto t = std::chrono::steady_clock::now();
      accepted |= rx.poll(w, arrival);
      longest = std::max(longest, std::chrono::steady_clock::now() - t);
    }
    counted += n;
    return longest;
  };

  const auto first = signedFrame("job", 1, 1, 1, realtimeNowNs());
  send(first);
  bool accepted = false;
  drain(1, accepted);
  ASSERT_TRUE(accepted);

  std::mt19937 rng(14);
  constexpr int kBatches = 50, kPerBatch = 60;  // a batch fits the socket buffer
  std::chrono::nanoseconds longest{0};
  uint64_t garbage = 0, forged = 0, replays = 0;
  for (int b = 0; b < kBatches; ++b) {
    for (int i = 0; i < kPerBatch; ++i) {
      std::vector<uint8_t> d;
      switch (i % 3) {
        case 0:  // random bytes, sometimes behind a valid header
          d.resize(1 + rng() % 200);
          for (auto& byte : d) byte = uint8_t(rng());
          if (i % 2 && d.size() >= wire::kHeaderSize) wire::putU32(d.data(), wire::kMagic);
          ++garbage;
          break;
        case 1:
          d = signedFrame("job", 100 + uint64_t(i), 2, 2, realtimeNowNs(), "not-the-secret");
          ++forged;
          break;
        case 2:
          d = first;
          ++replays;
          break;
      }
      send(d);
    }
    bool any = false;
    longest = std::max(longest, drain(kPerBatch, any));
    EXPECT_FALSE(any) << "batch " << b;
  }
  send(signedFrame("job", 2, 3, 0, realtimeNowNs()));
  accepted = false;
  drain(1, accepted);
  close(fd);
  EXPECT_TRUE(accepted);
  EXPECT_EQ(w, (ConfigWord{2, Topology(3), PinMode(0)}));
  EXPECT_EQ(v.accepted(), 2u);
  EXPECT_EQ(v.rejected(Reject::kMalformed), garbage);
  EXPECT_EQ(v.rejected(Reject::kBadMac), forged);
  EXPECT_EQ(v.rejected(Reject::kReplay), replays);
  EXPECT_EQ(v.accepted() + v.rejectedTotal() + v.duplicates(), 2 + garbage + forged + replays);
  EXPECT_LT(longest, std::chrono::milliseconds(200)) << "a step boundary's poll took too long";
}

TEST(ControlReceiver, PortInUseNamesTheFlag) {
  Verifier v("job", std::string(kSecret), 0);
  ControlReceiver first("127.0.0.1:0", v);
  try {
    ControlReceiver second("127.0.0.1:" + std::to_string(first.port()), v);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("--control"), std::string::npos);
  }
}

}  // namespace
}  // namespace bpftrain::trainer::control
