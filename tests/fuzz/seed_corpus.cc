// Writes the seed corpora of tests/fuzz/corpus/<target>/ from valid encodings, so the fuzzers
// start from inputs every decoder accepts. Run it after a format change and commit the result:
//   build/tests/fuzz/bpftrain-fuzz-seeds tests/fuzz/corpus
// (crash-* files in the corpus are regressions found by fuzzing; this program leaves them alone).
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "collector/upstream/summary_codec.h"
#include "collector/window/series_store.h"
#include "collector/window/sketch.h"
#include "common/control_frame.h"
#include "common/wire_format.h"

namespace {

using namespace bpftrain;
using namespace bpftrain::collector;
namespace fs = std::filesystem;
using Bytes = std::vector<uint8_t>;

fs::path g_root;

void put(const std::string& target, const std::string& name, const Bytes& b) {
  fs::create_directories(g_root / target);
  std::ofstream(g_root / target / name, std::ios::binary)
      .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
void put(const std::string& target, const std::string& name, std::string_view s) {
  put(target, name, Bytes(s.begin(), s.end()));
}

Bytes hello(uint64_t sender, uint32_t seq, std::string_view job, uint32_t rank) {
  Bytes b(wire::kMaxFrameSize);
  uint32_t tids[] = {1000, 1001, 1002};
  b.resize(wire::encodeHello(b, sender, seq, wire::Hello{job, "node-1", rank, 4, 999, tids}));
  return b;
}

Bytes samples(uint64_t sender, uint32_t seq) {
  using wire::MetricId;
  using wire::SampleType;
  std::vector<wire::SampleRecord> r = {
      {MetricId::kStepSeconds, SampleType::kTimer, 0, 0, 0.125},
      {MetricId::kAllreduceSeconds, SampleType::kTimer, 0, 10, 0.05},
      {MetricId::kAllreduceBytes, SampleType::kCounter, 0, 20, 1 << 20},
      {MetricId::kLoss, SampleType::kGauge, 0, 30, 0.7},
      {MetricId::kTopology, SampleType::kGauge, 0, 40, 1},
      {MetricId::kPinning, SampleType::kGauge, 0, 40, 2},
      {MetricId::kStep, SampleType::kGauge, 0, 50, 42},
  };
  Bytes b(wire::kMaxFrameSize);
  b.resize(wire::encodeSamples(b, sender, seq, 1'000'000'000, r));
  return b;
}

Bytes control(std::string_view job, uint64_t epoch, uint8_t topology, uint64_t ts) {
  wire::Control c{job, epoch, topology, 1, ts, {}};
  Bytes b(wire::kMaxFrameSize);
  b.resize(wire::encodeSignedControl(b, 7, uint32_t(epoch), c, "fuzz-secret-0123456789abcdef0123"));
  return b;
}

// An NCCL tuner decision (kind 6) signed under the fuzz secret: AllReduce (4) with `algorithm`
// and `protocol` (0xff: NCCL's own choice) from call `start`.
Bytes ncclDecision(std::string_view job, uint64_t epoch, uint64_t comm, uint64_t start,
                   uint8_t algorithm, uint8_t protocol, uint64_t ts) {
  wire::NcclControl c;
  c.job = job;
  c.epoch = epoch;
  c.comm_id = comm;
  c.start_call = start;
  c.collective = 4;
  c.algorithm = algorithm;
  c.protocol = protocol;
  c.timestamp_ns = ts;
  Bytes b(wire::kMaxFrameSize);
  b.resize(
      wire::encodeSignedNcclControl(b, 9, uint32_t(epoch), c, "fuzz-secret-0123456789abcdef0123"));
  return b;
}

Bytes cat(std::initializer_list<Bytes> parts) {
  Bytes out;
  for (const Bytes& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// A child's window-summary frames for a few series of each kind.
std::vector<Bytes> summaryFrames() {
  window::WindowConfig wc;
  wc.window = std::chrono::seconds(1);
  wc.step = std::chrono::milliseconds(500);
  auto store = window::SeriesStore::create(wc);
  window::Label job[] = {{"job", "digits"}, {"rank", "0"}};
  const int64_t now = 1'000'000'000;
  auto c = store->lookup("bpftrain_allreduce_bytes", job, window::SeriesKind::kCounter);
  auto g = store->lookup("bpftrain_loss", job, window::SeriesKind::kGauge);
  auto d = store->lookup("bpftrain_step_seconds", job, window::SeriesKind::kDistribution);
  auto n = store->lookup("bpftrain_queue_seconds", {}, window::SeriesKind::kDistribution);
  for (int i = 1; i <= 20; ++i) {
    store->record(0, c, 4096, now);
    store->record(0, g, 1.0 / i, now);
    store->record(0, d, 0.01 * i, now);
    store->record(0, n, i % 3 == 0 ? 0 : -0.5 * i, now);
  }
  std::vector<Bytes> frames;
  upstream::SummaryFramer framer(
      3, [&](std::span<const uint8_t> f) { frames.emplace_back(f.begin(), f.end()); });
  framer.begin(store->stepOf(now), int64_t(wc.step.count()));
  store->visitStep(store->stepOf(now), [&](const window::StepSummary& s) { framer.add(s); });
  framer.flush();
  return frames;
}

// summary_fuzz input: u16 record count, then the body.
Bytes summaryInput(const Bytes& frame) {
  Bytes out(2);
  wire::putU16(out.data(), wire::getU16(frame.data() + 20));
  out.insert(out.end(), frame.begin() + wire::kHeaderSize, frame.end());
  return out;
}

Bytes sketchBytes(std::initializer_list<double> values) {
  window::Sketch s;
  for (double v : values) s.add(v);
  Bytes b(s.serializedSize());
  b.resize(s.serialize(b));
  return b;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s CORPUS_DIR (tests/fuzz/corpus)\n", argv[0]);
    return 2;
  }
  g_root = argv[1];

  // wire_frames: each kind, several frames in one datagram, a summary frame.
  const std::vector<Bytes> summaries = summaryFrames();
  put("wire_frames", "hello", hello(1, 0, "digits", 0));
  put("wire_frames", "samples", samples(1, 1));
  put("wire_frames", "hello_samples", cat({hello(2, 0, "job-2", 3), samples(2, 1), samples(2, 3)}));
  put("wire_frames", "control", control("digits", 5, 2, 1'750'000'000'000'000'000));
  put("wire_frames", "summary", summaries.at(0));

  // statsd: each type, rates, tags, relative gauges, several lines.
  put("statsd", "counter", "requests.count:1|c");
  put("statsd", "gauge_tags", "queue.depth:42|g|#job:digits,rank:0");
  put("statsd", "timer_rate", "step.time:12.5|ms|@0.5|#job:digits");
  put("statsd", "histogram", "payload_bytes:4096|h\nlatency:3|d|#region:eu");
  put("statsd", "relative_gauge", "temp:+3|g\ntemp:-1.5|g\n");
  put("statsd", "many", "a.b:1|c\r\nc-d:2.5e3|g|#k:v\n9lives:1|ms|@1\n");

  // summary: every frame of a child's step.
  for (size_t i = 0; i < summaries.size(); ++i)
    put("summary", "step" + std::to_string(i), summaryInput(summaries[i]));

  // sketch: empty, one value, both signs and zero, a wide range.
  put("sketch", "empty", sketchBytes({}));
  put("sketch", "one", sketchBytes({1.5}));
  put("sketch", "signs", sketchBytes({-3, -0.001, 0, 0, 2, 1e6}));
  put("sketch", "wide", sketchBytes({1e-9, 1e-3, 1, 1e3, 1e9, 1e15}));

  // control: a signed decision (valid MAC under the fuzz secret), two in one datagram.
  const uint64_t now = 1'750'000'000'000'000'000;
  put("control", "decision", control("digits", 1, 1, now));
  put("control", "two", cat({control("digits", 2, 3, now), control("other", 3, 0, now)}));

  // nccl_decision: a signed decision (tree/LL for every communicator), then a stale epoch and
  // an unknown algorithm after a valid one in one datagram, and NCCL's own choice back.
  put("nccl_decision", "decision", ncclDecision("digits", 1, 0, 4096, 0, 0, now));
  put("nccl_decision", "three",
      cat({ncclDecision("digits", 3, 77, 100, 1, 2, now),
           ncclDecision("digits", 2, 77, 200, 0, 0, now),
           ncclDecision("digits", 4, 77, 300, 42, 0, now)}));
  put("nccl_decision", "nccl_choice", ncclDecision("digits", 5, 0, 9000, 0xff, 0xff, now));

  // config: the shipped example and every kind of key.
  put("config", "shipped",
      R"({"listen": "127.0.0.1:9470", "metrics": "127.0.0.1:9471", "window": "5s", "step": "500ms"})");
  put("config", "all_kinds",
      R"({"listen": "[::1]:0", "ingest_threads": 4, "max_series": 1000, "rcvbuf": 65536,
"no_bpf": true, "pid": [1, 2], "log_level": "debug", "upstream": "localhost:9470",
"control": false, "policy": "bandit", "job": "digits", "window": "10s", "step": "1s"})");
  put("config", "flags_spelling", R"({"ingest-threads": "2", "control-mode": "advise"})");
  std::printf("seeds written under %s\n", g_root.c_str());
  return 0;
}
