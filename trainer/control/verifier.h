// Authenticates controller decisions before rank 0 accepts them: HMAC-SHA256 with the shared
// secret over controlSigningBytes(), right job, timestamp within ±max_skew of now, never seen
// before (replay), epoch newer than the newest accepted (stale), known topology and pinning values.
// Every rejection is counted by reason and logged (rate-limited, so a flood cannot fill the log).
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/enum_names.h"
#include "common/hmac.h"
#include "common/training_config.h"

namespace bpftrain::trainer::control {

enum class Reject : uint8_t {
  kNone = 0,
  kMalformed,  // not a decodable control frame
  kWrongJob,
  kBadMac,
  kClockSkew,     // timestamp too far from now
  kReplay,        // this exact signed decision was seen before
  kStaleEpoch,    // epoch <= the newest accepted one
  kUnknownValue,  // topology or pinning value this trainer does not know
  kCount,
};
// The `reason` of each rejection in the log and in the tests' expectations.
inline constexpr auto kRejectNames = enumNames<Reject>({
    {Reject::kNone, "none"},
    {Reject::kMalformed, "malformed"},
    {Reject::kWrongJob, "wrong_job"},
    {Reject::kBadMac, "bad_mac"},
    {Reject::kClockSkew, "clock_skew"},
    {Reject::kReplay, "replay"},
    {Reject::kStaleEpoch, "stale_epoch"},
    {Reject::kUnknownValue, "unknown_value"},
});
static_assert(kRejectNames.size() == size_t(Reject::kCount));
constexpr std::string_view rejectName(Reject r) { return kRejectNames.name(r); }

// What rank 0 broadcasts each step and every rank applies at the same step boundary.
struct ConfigWord {
  uint64_t epoch = 0;
  Topology topology = Topology::kRing;
  PinMode pinning = PinMode::kNone;
  bool operator==(const ConfigWord&) const = default;
};

class Verifier {
 public:
  Verifier(std::string job, std::string secret, uint64_t current_epoch,
           std::chrono::seconds max_skew = std::chrono::seconds(30));

  // Checks every control frame in `datagram`; the newest accepted decision is written to `out`.
  // Returns kNone if at least one was accepted, else the reason the last one was rejected
  // (kStaleEpoch for a duplicate, which is not counted as a rejection).
  Reject verify(std::span<const uint8_t> datagram, uint64_t now_realtime_ns, ConfigWord& out);

  uint64_t rejected(Reject r) const { return rejected_[size_t(r)]; }
  uint64_t rejectedTotal() const;
  uint64_t accepted() const { return accepted_; }
  // Resends of the newest accepted decision (same epoch and values, fresh timestamp and MAC): the
  // controller repeats a decision until telemetry shows it applied. Ignored, not rejections.
  uint64_t duplicates() const { return duplicates_; }
  uint64_t newestEpoch() const { return newest_epoch_; }

 private:
  Reject check(std::span<const uint8_t> frame_bytes, uint64_t now_ns, ConfigWord& out);
  void count(Reject r, uint64_t epoch);

  std::string job_;
  std::string secret_;
  uint64_t newest_epoch_;
  uint64_t max_skew_ns_;
  std::array<Mac, 64> seen_{};  // recently accepted or rejected-as-stale MACs (ring)
  size_t seen_next_ = 0;
  std::array<uint64_t, size_t(Reject::kCount)> rejected_{};
  uint64_t accepted_ = 0;
  uint64_t duplicates_ = 0;
  ConfigWord newest_{};
};

}  // namespace bpftrain::trainer::control
