// Controller decisions as trainer rank 0 receives them (kControl frames, common/control_frame.h,
// trainer/control/verifier.h). Each decodable frame re-encodes to the same bytes; signed under the
// test secret it verifies, and changing any signed byte breaks the MAC. The raw datagram goes
// through a Verifier, and each decodable decision, signed, through another: an accepted decision
// is never accepted twice.
#include <fcntl.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "common/control_frame.h"
#include "tests/fuzz/fuzz_check.h"
#ifdef BPFTRAIN_FUZZ_VERIFIER
#include "trainer/control/verifier.h"
#endif

namespace {

using namespace bpftrain;
using wire::DecodeError;

constexpr std::string_view kSecret = "fuzz-secret-0123456789abcdef0123";
constexpr uint64_t kNowNs = 1'750'000'000'000'000'000;

#ifdef BPFTRAIN_FUZZ_VERIFIER
// The verifier logs each rejection (rate-limited per verifier); a fresh one per input would log
// every input, so its stderr goes to /dev/null for the call.
trainer::control::Reject quietVerify(trainer::control::Verifier& v, std::span<const uint8_t> d,
                                     trainer::control::ConfigWord& out) {
  static const int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
  const int saved = dup(STDERR_FILENO);
  dup2(null_fd, STDERR_FILENO);
  trainer::control::Reject r = v.verify(d, kNowNs, out);
  dup2(saved, STDERR_FILENO);
  close(saved);
  return r;
}
#endif

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> datagram(data, size);
#ifdef BPFTRAIN_FUZZ_VERIFIER
  trainer::control::ConfigWord word;
  trainer::control::Verifier raw("digits", std::string(kSecret), 0);
  FUZZ_CHECK((quietVerify(raw, datagram, word) == trainer::control::Reject::kNone) ==
             (raw.accepted() > 0));
  trainer::control::Verifier signer_side("digits", std::string(kSecret), 0);
#endif
  std::span<const uint8_t> rest = datagram;
  wire::FrameView f;
  while (!rest.empty() && wire::nextFrame(rest, f) == DecodeError::kNone) {
    if (f.header.kind != wire::FrameKind::kControl) continue;
    wire::Control c;
    if (wire::decodeControl(f, c) != DecodeError::kNone) continue;
    FUZZ_CHECK(wire::isValidName(c.job) && c.job.size() <= wire::kMaxNameLength);
    std::vector<uint8_t> out(wire::kMaxFrameSize);
    FUZZ_CHECK(wire::encodeControl(out, f.header.sender_id, f.header.sequence, c) ==
               f.header.length);
    FUZZ_CHECK(std::memcmp(out.data() + wire::kHeaderSize, f.body.data(), f.body.size()) == 0);

    wire::Control signed_c = c;
    FUZZ_CHECK(wire::signControl(signed_c, kSecret));
    FUZZ_CHECK(wire::verifyControl(signed_c, kSecret));
    FUZZ_CHECK(!wire::verifyControl(signed_c, "another-secret"));
    wire::Control changed = signed_c;
    changed.epoch ^= 1;
    FUZZ_CHECK(!wire::verifyControl(changed, kSecret));
    changed = signed_c;
    changed.topology ^= 0x80;
    FUZZ_CHECK(!wire::verifyControl(changed, kSecret));
#ifdef BPFTRAIN_FUZZ_VERIFIER
    size_t n = wire::encodeControl(out, f.header.sender_id, f.header.sequence, signed_c);
    FUZZ_CHECK(n == f.header.length);
    const std::span<const uint8_t> frame(out.data(), n);
    const uint64_t before = signer_side.accepted();
    trainer::control::Reject first = quietVerify(signer_side, frame, word);
    FUZZ_CHECK((first == trainer::control::Reject::kNone) == (signer_side.accepted() > before));
    if (first == trainer::control::Reject::kNone) {
      FUZZ_CHECK(word.epoch == c.epoch && signer_side.newestEpoch() == c.epoch);
      FUZZ_CHECK(quietVerify(signer_side, frame, word) == trainer::control::Reject::kReplay);
    }
#endif
  }
  return 0;
}
