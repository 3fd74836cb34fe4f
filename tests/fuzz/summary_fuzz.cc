// Window-summary frames (kWindowSummary, docs/windows.md) as a parent collector receives them from
// a child. The input is the frame body; its first two bytes are the header's record count, so
// the fuzzer need not find a header. A frame is merged whole or not at all; a merged one is
// forwarded again by the parent (SummaryFramer) and must decode and merge the same way.
#include <vector>

#include "collector/upstream/summary_codec.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace bpftrain;
using namespace bpftrain::collector;
using wire::DecodeError;

std::unique_ptr<window::SeriesStore> makeStore() {
  window::WindowConfig wc;
  wc.window = std::chrono::seconds(1);
  wc.step = std::chrono::milliseconds(500);
  wc.max_series = 64;
  return window::SeriesStore::create(wc);
}

wire::FrameView frameOf(uint16_t records, std::span<const uint8_t> body) {
  wire::FrameView f;
  f.header.kind = wire::FrameKind::kWindowSummary;
  f.header.length = uint16_t(wire::kHeaderSize + body.size());
  f.header.record_count = records;
  f.body = body;
  return f;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2 || size - 2 > wire::kMaxFrameSize - wire::kHeaderSize) return 0;
  const uint16_t records = wire::getU16(data);
  const wire::FrameView frame = frameOf(records, std::span<const uint8_t>(data + 2, size - 2));
  constexpr int64_t kNow = 1'000'000'000;

  auto store = makeStore();
  upstream::ApplyStats stats;
  DecodeError e = upstream::applySummary(frame, *store, 0, kNow, &stats);
  if (e != DecodeError::kNone) {
    FUZZ_CHECK(store->seriesCount() == 0 && stats.merged == 0);  // nothing merged from a bad frame
    return 0;
  }
  FUZZ_CHECK(stats.merged + stats.rejected == records);
  FUZZ_CHECK(store->seriesCount() <= stats.merged);

  // Forward what was merged, as a parent with its own --upstream would, and merge it again.
  std::vector<std::vector<uint8_t>> frames;
  upstream::SummaryFramer framer(
      1, [&](std::span<const uint8_t> f) { frames.emplace_back(f.begin(), f.end()); });
  const int64_t step = store->stepOf(kNow);
  framer.begin(step, int64_t(store->config().step.count()));
  size_t added = 0;
  store->visitStep(step, [&](const window::StepSummary& s) { added += framer.add(s) ? 1 : 0; });
  framer.flush();
  auto again = makeStore();
  size_t merged = 0;
  for (const auto& bytes : frames) {
    std::span<const uint8_t> rest(bytes);
    wire::FrameView f;
    FUZZ_CHECK(wire::nextFrame(rest, f) == DecodeError::kNone && rest.empty());
    upstream::ApplyStats s2;
    FUZZ_CHECK(upstream::applySummary(f, *again, 0, kNow, &s2) == DecodeError::kNone);
    merged += s2.merged;
  }
  FUZZ_CHECK(merged == added);
  FUZZ_CHECK(again->seriesCount() == store->seriesCount());
  return 0;
}
