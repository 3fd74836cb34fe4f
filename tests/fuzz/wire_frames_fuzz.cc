// Binary datagrams (docs/wire-format.md) as the collector receives them: the frame splitter and
// every body decoder, each decoded frame re-encoded to the same bytes, then the whole datagram
// through an ingest Dispatcher over a real series store (window summaries merged as --upstream
// children's are).
#include <cstring>
#include <vector>

#include "collector/ingest/dispatcher.h"
#include "collector/upstream/summary_codec.h"
#include "common/wire_format.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace bpftrain;
using wire::DecodeError;

void checkSamples(const wire::FrameView& f) {
  wire::SamplesView s;
  if (wire::decodeSamples(f, s) != DecodeError::kNone) return;
  FUZZ_CHECK(s.size() == f.header.record_count);
  std::vector<wire::SampleRecord> records;
  bool reserved_zero = true;
  for (size_t i = 0; i < s.size(); ++i) {
    records.push_back(s[i]);
    FUZZ_CHECK(!wire::metricInfo(records.back().metric).name.empty());
    reserved_zero &= records.back().reserved == 0;
  }
  std::vector<uint8_t> out(wire::kMaxFrameSize);
  size_t n =
      wire::encodeSamples(out, f.header.sender_id, f.header.sequence, s.base_timestamp_ns, records);
  FUZZ_CHECK(n == f.header.length);
  // The encoder writes the reserved byte as 0; the decoder ignores it.
  if (reserved_zero)
    FUZZ_CHECK(std::memcmp(out.data() + wire::kHeaderSize, f.body.data(), f.body.size()) == 0);
}

void checkHello(const wire::FrameView& f) {
  wire::HelloView h;
  if (wire::decodeHello(f, h) != DecodeError::kNone) return;
  FUZZ_CHECK(wire::isValidName(h.job) && wire::isValidName(h.node));
  FUZZ_CHECK(h.tidCount() == f.header.record_count && h.tidCount() <= wire::kMaxTids);
  std::vector<uint32_t> tids;
  for (size_t i = 0; i < h.tidCount(); ++i) tids.push_back(h.tid(i));
  wire::Hello again{h.job, h.node, h.rank, h.world, h.pid, tids};
  std::vector<uint8_t> out(wire::kMaxFrameSize);
  size_t n = wire::encodeHello(out, f.header.sender_id, f.header.sequence, again);
  FUZZ_CHECK(n == f.header.length);
  FUZZ_CHECK(std::memcmp(out.data() + wire::kHeaderSize, f.body.data(), f.body.size()) == 0);
}

void checkControl(const wire::FrameView& f) {
  wire::Control c;
  if (wire::decodeControl(f, c) != DecodeError::kNone) return;
  std::vector<uint8_t> out(wire::kMaxFrameSize);
  size_t n = wire::encodeControl(out, f.header.sender_id, f.header.sequence, c);
  FUZZ_CHECK(n == f.header.length);
  FUZZ_CHECK(std::memcmp(out.data() + wire::kHeaderSize, f.body.data(), f.body.size()) == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> datagram(data, size);
  std::span<const uint8_t> rest = datagram;
  wire::FrameView f;
  while (!rest.empty()) {
    const size_t before = rest.size();
    if (wire::nextFrame(rest, f) != DecodeError::kNone) {
      FUZZ_CHECK(rest.size() == before);  // a rejected frame consumes nothing
      break;
    }
    FUZZ_CHECK(f.header.length >= wire::kHeaderSize && f.header.length <= wire::kMaxFrameSize);
    FUZZ_CHECK(before - rest.size() == f.header.length);
    FUZZ_CHECK(f.body.size() + wire::kHeaderSize == f.header.length);
    switch (f.header.kind) {
      case wire::FrameKind::kSamples:
        checkSamples(f);
        break;
      case wire::FrameKind::kHello:
        checkHello(f);
        break;
      case wire::FrameKind::kControl:
        checkControl(f);
        break;
      case wire::FrameKind::kWindowSummary:
        break;  // summary_fuzz
      case wire::FrameKind::kLabelledSamples: {
        wire::LabelledSamplesView v;
        if (wire::decodeLabelledSamples(f, v) == DecodeError::kNone) {
          size_t offset = 0;
          for (size_t i = 0; i < v.count; ++i) v.next(offset);
          FUZZ_CHECK(offset == v.records.size());
        }
        break;
      }
      case wire::FrameKind::kNcclControl: {
        wire::NcclControl c;
        (void)wire::decodeNcclControl(f, c);
        break;
      }
    }
  }

  // The consumer: hostile datagrams are counted, never crash, never exceed the store's bounds.
  collector::window::WindowConfig wc;
  wc.window = std::chrono::seconds(1);
  wc.step = std::chrono::milliseconds(500);
  wc.max_series = 64;
  auto store = collector::window::SeriesStore::create(wc);
  collector::ingest::SenderRegistry registry(16);
  collector::ingest::IngestStats stats;
  collector::ingest::DispatchOptions options;
  options.summary = [](const wire::FrameView& frame, collector::window::SeriesStore& s, int writer,
                       int64_t now_ns) {
    return collector::upstream::applySummary(frame, s, writer, now_ns);
  };
  collector::ingest::Dispatcher dispatcher(*store, registry, stats, 0, options);
  dispatcher.handleDatagram(datagram, 1'000'000'000);
  dispatcher.handleDatagram(datagram, 1'600'000'000);  // again, one step later: sequences repeat
  FUZZ_CHECK(store->seriesCount() <= wc.max_series);
  FUZZ_CHECK(registry.size() <= 16);
  (void)store->snapshot(1'700'000'000);
  return 0;
}
