// NCCL tuner decisions as the plugin's agent receives them (kNcclControl frames,
// plugins/nccl/decision_verifier.h): the raw datagram through a DecisionVerifier, then each
// decodable decision re-encoded, signed under the test secret and verified by a fresh one.
// Invariants: a verifier accepts exactly what it publishes to the board and counts every frame
// it looked at; the same datagram again is never accepted twice; a decodable frame re-encodes to
// the same bytes; a signed decision verifies and any signed byte changed breaks it; a signed,
// fresh decision with known values is accepted and reaches the board field for field.
#include <cstring>
#include <vector>

#include "common/control_frame.h"
#include "common/wire_format.h"
#include "plugins/nccl/decision_board.h"
#include "plugins/nccl/decision_verifier.h"
#include "plugins/nccl/nccl_abi.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace bpftrain;
using nccl_plugin::DecisionBoard;
using nccl_plugin::DecisionVerifier;
using nccl_plugin::Refusal;
using wire::DecodeError;

constexpr std::string_view kSecret = "fuzz-secret-0123456789abcdef0123";
constexpr uint64_t kNowNs = 1'750'000'000'000'000'000;

uint64_t outcomes(const DecisionVerifier& v) {
  uint64_t n = v.accepted();
  for (size_t r = 0; r < size_t(Refusal::kCount); ++r) n += v.refused(Refusal(r));
  return n;
}

bool knownValues(const wire::NcclControl& c) {
  using nccl_plugin::kAny;
  namespace abi = nccl_plugin::abi;
  return (c.algorithm == kAny || c.algorithm < abi::kNumAlgorithms) &&
         (c.protocol == kAny || c.protocol < abi::kNumProtocols) &&
         (c.collective == kAny || c.collective < abi::ncclFuncSendRecv);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> datagram(data, size);
  {
    DecisionVerifier raw("digits", std::string(kSecret));
    DecisionBoard board;
    const int n = raw.verify(datagram, kNowNs, board);
    FUZZ_CHECK(n >= 0 && uint64_t(n) == raw.accepted());
    FUZZ_CHECK(outcomes(raw) >= 1);  // every datagram is accepted or counted as refused
    FUZZ_CHECK((n > 0) == (board.version() > 0));
    const uint64_t before = raw.accepted();
    FUZZ_CHECK(raw.verify(datagram, kNowNs, board) == 0);  // replays and stale epochs
    FUZZ_CHECK(raw.accepted() == before);
  }

  std::span<const uint8_t> rest = datagram;
  wire::FrameView f;
  while (!rest.empty() && wire::nextFrame(rest, f) == DecodeError::kNone) {
    if (f.header.kind != wire::FrameKind::kNcclControl) continue;
    wire::NcclControl c;
    if (wire::decodeNcclControl(f, c) != DecodeError::kNone) continue;
    FUZZ_CHECK(wire::isValidName(c.job) && c.job.size() <= wire::kMaxNameLength);
    std::vector<uint8_t> out(wire::kMaxFrameSize);
    FUZZ_CHECK(wire::encodeNcclControl(out, f.header.sender_id, f.header.sequence, c) ==
               f.header.length);
    FUZZ_CHECK(std::memcmp(out.data() + wire::kHeaderSize, f.body.data(), f.body.size()) == 0);

    wire::NcclControl s = c;
    const size_t n =
        wire::encodeSignedNcclControl(out, f.header.sender_id, f.header.sequence, s, kSecret);
    FUZZ_CHECK(n == f.header.length);
    FUZZ_CHECK(wire::verifyNcclControl(s, kSecret));
    FUZZ_CHECK(!wire::verifyNcclControl(s, "another-secret"));
    for (auto change : {+[](wire::NcclControl& x) { x.epoch ^= 1; },
                        +[](wire::NcclControl& x) { x.start_call ^= 1; },
                        +[](wire::NcclControl& x) { x.algorithm ^= 0x80; },
                        +[](wire::NcclControl& x) { x.timestamp_ns ^= 1; }}) {
      wire::NcclControl changed = s;
      change(changed);
      FUZZ_CHECK(!wire::verifyNcclControl(changed, kSecret));
    }

    // Signed, for its own job, at its own timestamp: accepted exactly when the epoch is new and
    // the values are known.
    DecisionVerifier fresh(std::string(s.job), std::string(kSecret));
    DecisionBoard board;
    const int accepted =
        fresh.verify(std::span<const uint8_t>(out.data(), n), s.timestamp_ns, board);
    FUZZ_CHECK(accepted == ((s.epoch > 0 && knownValues(s)) ? 1 : 0));
    if (accepted == 1) {
      nccl_plugin::Decision d;
      FUZZ_CHECK(board.find(s.comm_id, d) == DecisionBoard::Read::kFound);
      FUZZ_CHECK(d.epoch == s.epoch && d.comm_id == s.comm_id && d.start_call == s.start_call &&
                 d.collective == s.collective && d.algorithm == s.algorithm &&
                 d.protocol == s.protocol && d.channels == s.channels);
      FUZZ_CHECK(fresh.verify(std::span<const uint8_t>(out.data(), n), s.timestamp_ns, board) == 0);
      FUZZ_CHECK(fresh.refused(Refusal::kReplay) == 1);
    }
  }
  return 0;
}
