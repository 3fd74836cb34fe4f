// Authenticates NCCL tuner decisions (wire kind 6) before they reach the DecisionBoard, with
// the checks the trainer's verifier makes for its own decisions (trainer/control/verifier.h):
// HMAC-SHA256 under the shared secret, right job, timestamp within +-max_skew, never seen before,
// epoch newer than the newest accepted, known algorithm/protocol values. Counted by reason.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>

#include "common/hmac.h"
#include "plugins/nccl/decision_board.h"

namespace bpftrain::nccl_plugin {

enum class Refusal : uint8_t {
  kMalformed,
  kWrongJob,
  kBadMac,
  kClockSkew,
  kReplay,
  kStaleEpoch,
  kUnknownValue,
  kNoSecret,  // BPFTRAIN_SECRET_FILE unset or unreadable: every decision is refused
  kLate,      // counted by the tuner: the start call had passed when the decision was read
  kUnsupported,
  kCount,
};
inline constexpr const char* kRefusalNames[] = {
    "malformed",   "wrong_job",     "bad_mac",   "clock_skew", "replay",
    "stale_epoch", "unknown_value", "no_secret", "late",       "unsupported"};
static_assert(std::size(kRefusalNames) == size_t(Refusal::kCount));

class DecisionVerifier {
 public:
  // An empty secret refuses everything (kNoSecret).
  DecisionVerifier(std::string job, std::string secret, uint64_t max_skew_ns = 30'000'000'000ull);

  // Every frame of the datagram; accepted decisions are published to `board`. Returns how many.
  int verify(std::span<const uint8_t> datagram, uint64_t now_realtime_ns, DecisionBoard& board);
  uint64_t refused(Refusal r) const { return refused_[size_t(r)]; }
  uint64_t accepted() const { return accepted_; }

 private:
  std::string job_, secret_;
  uint64_t max_skew_ns_;
  uint64_t newest_epoch_ = 0;
  std::array<Mac, 64> seen_{};
  size_t seen_next_ = 0;
  std::array<uint64_t, size_t(Refusal::kCount)> refused_{};
  uint64_t accepted_ = 0;
};

}  // namespace bpftrain::nccl_plugin
