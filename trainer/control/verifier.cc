#include "trainer/control/verifier.h"

#include <algorithm>
#include <cstdio>

#include "common/control_frame.h"
#include "common/wire_format.h"

namespace bpftrain::trainer::control {

Verifier::Verifier(std::string job, std::string secret, uint64_t current_epoch,
                   std::chrono::seconds max_skew)
    : job_(std::move(job)),
      secret_(std::move(secret)),
      newest_epoch_(current_epoch),
      max_skew_ns_(uint64_t(std::chrono::nanoseconds(max_skew).count())) {}

uint64_t Verifier::rejectedTotal() const {
  uint64_t t = 0;
  for (uint64_t v : rejected_) t += v;
  return t;
}

void Verifier::count(Reject r, uint64_t epoch) {
  uint64_t n = ++rejected_[size_t(r)];
  // Log the first few of each reason, then every 1000th: visible, but a flood cannot fill the log.
  if (n <= 10 || n % 1000 == 0)
    std::fprintf(stderr,
                 "bpftrain-train: control: rejected decision (epoch %llu): %.*s (%llu so far)\n",
                 static_cast<unsigned long long>(epoch), int(rejectName(r).size()),
                 rejectName(r).data(), static_cast<unsigned long long>(n));
}

Reject Verifier::verify(std::span<const uint8_t> datagram, uint64_t now_ns, ConfigWord& out) {
  Reject last = Reject::kMalformed;
  bool any = false;
  wire::FrameView frame;
  std::span<const uint8_t> rest = datagram;
  while (!rest.empty()) {
    std::span<const uint8_t> before = rest;
    if (wire::nextFrame(rest, frame) != wire::DecodeError::kNone) {
      count(Reject::kMalformed, 0);
      return any ? Reject::kNone : Reject::kMalformed;
    }
    last = check(before.first(before.size() - rest.size()), now_ns, out);
    any |= last == Reject::kNone;
  }
  if (datagram.empty()) count(Reject::kMalformed, 0);
  return any ? Reject::kNone : last;
}

Reject Verifier::check(std::span<const uint8_t> frame_bytes, uint64_t now_ns, ConfigWord& out) {
  wire::FrameView frame;
  wire::Control c;
  if (wire::nextFrame(frame_bytes, frame) != wire::DecodeError::kNone ||
      frame.header.kind != wire::FrameKind::kControl ||
      wire::decodeControl(frame, c) != wire::DecodeError::kNone) {
    count(Reject::kMalformed, 0);
    return Reject::kMalformed;
  }
  if (c.job != job_) {
    count(Reject::kWrongJob, c.epoch);
    return Reject::kWrongJob;
  }
  if (!wire::verifyControl(c, secret_)) {
    count(Reject::kBadMac, c.epoch);
    return Reject::kBadMac;
  }
  uint64_t skew = now_ns > c.timestamp_ns ? now_ns - c.timestamp_ns : c.timestamp_ns - now_ns;
  if (skew > max_skew_ns_) {
    count(Reject::kClockSkew, c.epoch);
    return Reject::kClockSkew;
  }
  if (std::any_of(seen_.begin(), seen_.end(), [&](const Mac& m) { return macEqual(m, c.mac); })) {
    count(Reject::kReplay, c.epoch);
    return Reject::kReplay;
  }
  seen_[seen_next_++ % seen_.size()] = c.mac;
  if (accepted_ > 0 && c.epoch == newest_.epoch && c.topology == uint8_t(newest_.topology) &&
      c.pinning == uint8_t(newest_.pinning)) {
    ++duplicates_;
    return Reject::kStaleEpoch;
  }
  if (c.epoch <= newest_epoch_) {
    count(Reject::kStaleEpoch, c.epoch);
    return Reject::kStaleEpoch;
  }
  if (c.topology >= kTopologyCount || c.pinning >= kPinModeCount) {
    count(Reject::kUnknownValue, c.epoch);
    return Reject::kUnknownValue;
  }
  newest_epoch_ = c.epoch;
  out = {c.epoch, Topology(c.topology), PinMode(c.pinning)};
  newest_ = out;
  ++accepted_;
  std::fprintf(stderr,
               "bpftrain-train: control: accepted epoch %llu: topology %.*s, pinning %.*s\n",
               static_cast<unsigned long long>(c.epoch), int(topologyName(out.topology).size()),
               topologyName(out.topology).data(), int(pinModeName(out.pinning).size()),
               pinModeName(out.pinning).data());
  return Reject::kNone;
}

}  // namespace bpftrain::trainer::control
