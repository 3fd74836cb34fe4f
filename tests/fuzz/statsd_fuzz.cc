// StatsD / DogStatsD text as the collector receives it: every line through the parser and the
// name mapping (outputs must be views inside the line, within the documented bounds), then the
// datagram through an ingest Dispatcher over a real series store.
#include <cmath>

#include "collector/ingest/dispatcher.h"
#include "collector/ingest/statsd.h"
#include "tests/fuzz/fuzz_check.h"

namespace {

using namespace bpftrain;
using namespace bpftrain::collector::ingest;

bool inside(std::string_view part, std::string_view whole) {
  return part.empty() ||
         (part.data() >= whole.data() && part.data() + part.size() <= whole.data() + whole.size());
}

void checkLine(std::string_view line) {
  StatsdLine out;
  if (parseStatsdLine(line, out)) return;           // a reason: rejected
  if (out.ignored != IgnoredReason::kNone) return;  // an event or service check, not stored
  FUZZ_CHECK(!out.name.empty() && out.name.size() <= kMaxStatsdNameLength);
  // The name is a view into the line or, with a SignalFX [tags] section cut out, into name_buf.
  FUZZ_CHECK(inside(out.name, line) ||
             inside(out.name, std::string_view(out.name_buf, sizeof out.name_buf)));
  FUZZ_CHECK(inside(out.key_name, line) && inside(out.tags_raw, line) &&
             inside(out.container, line));
  FUZZ_CHECK(std::isfinite(out.value));
  FUZZ_CHECK(out.sample_rate > 0 && out.sample_rate <= 1);
  FUZZ_CHECK(out.tag_count <= kMaxStatsdTags);
  for (size_t i = 0; i < out.tag_count; ++i) {
    FUZZ_CHECK(!out.tags[i].name.empty() && out.tags[i].name.size() <= kMaxStatsdNameLength);
    FUZZ_CHECK(out.tags[i].value.size() <= kMaxStatsdTagValueLength);
    // |c:ID becomes the tag container_id (a name of the parser's own).
    FUZZ_CHECK(inside(out.tags[i].name, line) || out.tags[i].name == "container_id");
    FUZZ_CHECK(inside(out.tags[i].value, line));
  }
  if (out.type == StatsdType::kCounter) FUZZ_CHECK(out.value >= 0);
  char mapped[kMaxStatsdNameLength + 1];
  size_t n = mapStatsdName(out.name, mapped, sizeof mapped);
  FUZZ_CHECK(n <= sizeof mapped);
  for (size_t i = 0; i < n; ++i) {
    char c = mapped[i];
    FUZZ_CHECK((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
               c == '_');
  }
  if (n > 0) FUZZ_CHECK(!(mapped[0] >= '0' && mapped[0] <= '9'));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (size_t start = 0; start <= text.size();) {
    size_t nl = text.find('\n', start);
    if (nl == std::string_view::npos) nl = text.size();
    checkLine(text.substr(start, nl - start));
    start = nl + 1;
  }

  collector::window::WindowConfig wc;
  wc.window = std::chrono::seconds(1);
  wc.step = std::chrono::milliseconds(500);
  wc.max_series = 64;
  wc.max_labels_per_series = 4;
  auto store = collector::window::SeriesStore::create(wc);
  SenderRegistry registry(16);
  IngestStats stats;
  DispatchOptions options;
  options.max_cached_series = 8;  // small, so that the cache clears within one input
  Dispatcher dispatcher(*store, registry, stats, 0, options);
  dispatcher.handleDatagram(fuzz::bytesOf(text), 1'000'000'000);
  dispatcher.handleDatagram(fuzz::bytesOf(text), 1'600'000'000);
  FUZZ_CHECK(store->seriesCount() <= wc.max_series);
  for (const auto& s : store->snapshot(1'700'000'000)) {
    FUZZ_CHECK(s.labels.size() <= wc.max_labels_per_series);
    if (s.kind == collector::window::SeriesKind::kCounter) FUZZ_CHECK(s.total >= 0);
  }
  return 0;
}
