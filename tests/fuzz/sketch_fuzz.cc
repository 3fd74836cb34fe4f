// Sketch deserialization (the sketches inside window summaries, docs/windows.md): whatever
// decodes must re-encode to a sketch with the same bins, answer quantiles in order, and merge;
// a second sketch with a small bin bound decodes the same bytes with its folding path.
#include <cmath>
#include <vector>

#include "collector/window/sketch.h"
#include "tests/fuzz/fuzz_check.h"

using bpftrain::collector::window::Sketch;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::span<const uint8_t> in(data, size);
  Sketch s;
  if (!s.deserialize(in)) {
    FUZZ_CHECK(s.empty());  // a rejected input leaves the sketch empty
  } else {
    std::vector<uint8_t> out(s.serializedSize());
    FUZZ_CHECK(s.serialize(out) == out.size());
    Sketch back;
    FUZZ_CHECK(back.deserialize(out));
    FUZZ_CHECK(back.sameBins(s) && back.count() == s.count());
    if (!s.empty()) {
      double prev = -INFINITY;
      for (double q : {0.0, 0.25, 0.5, 0.9, 0.99, 1.0}) {
        double v = s.quantile(q);
        FUZZ_CHECK(!std::isnan(v) && v >= prev);
        prev = v;
      }
    }
    Sketch sum = s;
    FUZZ_CHECK(sum.merge(back));
    FUZZ_CHECK(sum.count() >= s.count());
  }
  Sketch folded(bpftrain::collector::window::kDefaultRelativeError, 16);
  if (folded.deserialize(in) && !folded.empty()) {
    // Folding keeps every count unless a folded bin saturates at 2^32 (hostile input only).
    FUZZ_CHECK(folded.count() <= s.count() && folded.count() > 0);
    FUZZ_CHECK(!std::isnan(folded.quantile(0.5)));
  }
  return 0;
}
