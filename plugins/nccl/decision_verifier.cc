#include "plugins/nccl/decision_verifier.h"

#include <algorithm>

#include "common/control_frame.h"
#include "common/wire_format.h"
#include "plugins/nccl/nccl_abi.h"

namespace bpftrain::nccl_plugin {

DecisionVerifier::DecisionVerifier(std::string job, std::string secret, uint64_t max_skew_ns)
    : job_(std::move(job)), secret_(std::move(secret)), max_skew_ns_(max_skew_ns) {}

int DecisionVerifier::verify(std::span<const uint8_t> datagram, uint64_t now_ns,
                             DecisionBoard& board) {
  int accepted = 0;
  std::span<const uint8_t> rest = datagram;
  do {
    wire::FrameView frame;
    wire::NcclControl c;
    if (wire::nextFrame(rest, frame) != wire::DecodeError::kNone ||
        frame.header.kind != wire::FrameKind::kNcclControl ||
        wire::decodeNcclControl(frame, c) != wire::DecodeError::kNone) {
      ++refused_[size_t(Refusal::kMalformed)];
      return accepted;  // the length of what follows cannot be trusted
    }
    Refusal why = Refusal::kCount;
    uint64_t skew = now_ns > c.timestamp_ns ? now_ns - c.timestamp_ns : c.timestamp_ns - now_ns;
    if (secret_.empty()) {
      why = Refusal::kNoSecret;
    } else if (c.job != job_) {
      why = Refusal::kWrongJob;
    } else if (!wire::verifyNcclControl(c, secret_)) {
      why = Refusal::kBadMac;
    } else if (skew > max_skew_ns_) {
      why = Refusal::kClockSkew;
    } else if (std::any_of(seen_.begin(), seen_.end(),
                           [&](const Mac& m) { return macEqual(m, c.mac); })) {
      why = Refusal::kReplay;
    } else if (c.epoch <= newest_epoch_) {
      seen_[seen_next_++ % seen_.size()] = c.mac;
      why = Refusal::kStaleEpoch;
    } else if ((c.algorithm != kAny && c.algorithm >= abi::kNumAlgorithms) ||
               (c.protocol != kAny && c.protocol >= abi::kNumProtocols) ||
               (c.collective != kAny && c.collective >= abi::ncclFuncSendRecv)) {
      seen_[seen_next_++ % seen_.size()] = c.mac;
      why = Refusal::kUnknownValue;
    }
    if (why != Refusal::kCount) {
      ++refused_[size_t(why)];
      continue;
    }
    seen_[seen_next_++ % seen_.size()] = c.mac;
    newest_epoch_ = c.epoch;
    board.publish(Decision{c.epoch, c.comm_id, c.start_call, c.collective, c.algorithm, c.protocol,
                           c.channels});
    ++accepted_;
    ++accepted;
  } while (!rest.empty());
  return accepted;
}

}  // namespace bpftrain::nccl_plugin
