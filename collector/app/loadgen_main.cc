// bpftrain-loadgen: simulates training ranks (binary frames with hellos) or StatsD clients and
// prints exactly what it sent as one final JSON line, so tests and benchmarks can compare sent
// with counted. Datagrams go out in sendmmsg batches; each worker keeps one socket (its flow) so
// the collector sees its sequence numbers in order.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/host_port.h"
#include "common/wire_format.h"

namespace {

using Clock = std::chrono::steady_clock;
using bpftrain::wire::MetricId;
using bpftrain::wire::SampleRecord;
using bpftrain::wire::SampleType;

struct Options {
  bpftrain::HostPort target{"127.0.0.1", 9470};
  bool statsd = false;
  int workers = 4;
  double hz = 10;        // datagrams per worker per second (workers mode)
  double rate = 0;       // samples per second in total (rate mode) when > 0
  int per_datagram = 0;  // samples per datagram; default 3 (workers) or 50 (rate)
  double duration_s = 2;
  int sockets = 16;
  std::string job = "loadgen";
  uint64_t sender_base = 0x10ad0000;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "bpftrain-loadgen: %s\n"
               "usage: bpftrain-loadgen [--target HOST:PORT] [--protocol binary|statsd]\n"
               "  [--workers K] [--hz R | --rate SAMPLES_PER_S] [--per-datagram N]\n"
               "  [--duration SECONDS] [--sockets S] [--job NAME] [--sender-base ID]\n",
               why);
  std::exit(2);
}

double number(const char* flag, const char* s) {
  double v;
  auto [p, ec] = std::from_chars(s, s + std::strlen(s), v);
  if (ec != std::errc() || *p != 0 || !std::isfinite(v) || v < 0)
    usage((std::string(flag) + ": expected a non-negative number, got '" + s + "'").c_str());
  return v;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&]() -> const char* {
      if (i + 1 >= argc) usage((a + " needs a value").c_str());
      return argv[++i];
    };
    if (a == "--target") {
      std::string error;
      auto hp = bpftrain::parseHostPort(val(), bpftrain::PortZero::kRejected, error);
      if (!hp) usage(("--target: " + error).c_str());
      o.target = *hp;
    } else if (a == "--protocol") {
      std::string p = val();
      if (p != "binary" && p != "statsd") usage("--protocol: binary or statsd");
      o.statsd = p == "statsd";
    } else if (a == "--workers") {
      o.workers = int(number("--workers", val()));
    } else if (a == "--hz") {
      o.hz = number("--hz", val());
    } else if (a == "--rate") {
      o.rate = number("--rate", val());
    } else if (a == "--per-datagram") {
      o.per_datagram = int(number("--per-datagram", val()));
    } else if (a == "--duration") {
      o.duration_s = number("--duration", val());
    } else if (a == "--sockets") {
      o.sockets = int(number("--sockets", val()));
    } else if (a == "--sender-base") {
      // Distinct bases make distinct senders: a job that ends and another that starts.
      o.sender_base = uint64_t(number("--sender-base", val()));
    } else if (a == "--job") {
      o.job = val();
      if (!bpftrain::wire::isValidName(o.job)) usage("--job: letters, digits, _ - . only");
    } else if (a == "--help" || a == "-h") {
      usage("help");
    } else {
      usage(("unknown flag " + a).c_str());
    }
  }
  if (o.workers < 1) usage("--workers must be >= 1");
  if (o.per_datagram == 0) o.per_datagram = o.rate > 0 ? 50 : 3;
  if (o.per_datagram < 1 || size_t(o.per_datagram) > bpftrain::wire::kMaxSamplesPerFrame)
    usage("--per-datagram: 1..500");
  o.sockets = std::clamp(o.sockets, 1, o.workers);
  return o;
}

// The metrics a simulated rank cycles through: a timer, a gauge, a counter.
struct GenMetric {
  MetricId id;
  SampleType type;
  const char* statsd_name;  // StatsD name; Prometheus name after statsd_exporter mapping below
  const char* prom_name;
  const char* statsd_type;
};
constexpr GenMetric kMetrics[] = {
    {MetricId::kStepSeconds, SampleType::kTimer, "loadgen.step", "loadgen_step", "ms"},
    {MetricId::kLoss, SampleType::kGauge, "loadgen.loss", "loadgen_loss", "g"},
    {MetricId::kAllreduceBytes, SampleType::kCounter, "loadgen.bytes", "loadgen_bytes", "c"},
};
constexpr size_t kMetricCount = std::size(kMetrics);

struct Worker {
  uint64_t sender_id;
  uint32_t sequence = 0;
  int socket;
  uint64_t tick = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  std::string error;
  std::optional<bpftrain::SocketAddress> dst =
      bpftrain::resolveHostPort(o.target, SOCK_DGRAM, error);
  if (!dst) usage(("--target: " + error).c_str());

  std::vector<int> fds(size_t(o.sockets));
  for (int& fd : fds) {
    fd = socket(dst->family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int sndbuf = 4 << 20;
    setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &sndbuf, sizeof sndbuf);
    if (connect(fd, dst->get(), dst->length) != 0) {
      std::perror("bpftrain-loadgen: connect");
      return 1;
    }
  }
  std::vector<Worker> workers(size_t(o.workers));
  for (int w = 0; w < o.workers; ++w) {
    // Contiguous blocks of workers per socket, so consecutive datagrams batch on one socket.
    workers[w] = Worker{o.sender_base + uint64_t(w), 0, int(int64_t(w) * o.sockets / o.workers), 0};
  }

  // Counts of what the kernel accepted, per metric (Prometheus name) and in total.
  uint64_t sent_count[kMetricCount] = {};
  double sent_sum[kMetricCount] = {};
  uint64_t datagrams = 0, samples = 0, hellos = 0, send_errors = 0;

  constexpr int kBatch = 64;
  const size_t kBuf = std::max<size_t>(bpftrain::wire::kMaxFrameSize, size_t(o.per_datagram) * 96);
  std::vector<uint8_t> storage(kBatch * kBuf);
  mmsghdr msgs[kBatch];
  iovec iovs[kBatch];
  // Per datagram in the batch: which worker, and how many of each metric it carries.
  uint16_t batch_counts[kBatch][kMetricCount];
  double batch_sums[kBatch][kMetricCount];

  auto sendBatch = [&](int fd, int n, bool is_hello) {
    int done = 0;
    while (done < n) {
      int r = sendmmsg(fd, msgs + done, unsigned(n - done), 0);
      if (r <= 0) {
        if (errno == EINTR) continue;
        send_errors += uint64_t(n - done);
        break;
      }
      for (int i = done; i < done + r; ++i) {
        ++datagrams;
        if (is_hello) {
          ++hellos;
          continue;
        }
        for (size_t m = 0; m < kMetricCount; ++m) {
          sent_count[m] += batch_counts[i][m];
          sent_sum[m] += batch_sums[i][m];
          samples += batch_counts[i][m];
        }
      }
      done += r;
    }
  };

  auto sendHellos = [&]() {
    if (o.statsd) return;
    for (int s = 0; s < o.sockets; ++s) {
      int n = 0;
      for (Worker& w : workers) {
        if (w.socket != s) continue;
        uint8_t* buf = storage.data() + size_t(n) * kBuf;
        uint32_t pid = uint32_t(getpid());
        bpftrain::wire::Hello h{o.job,
                                "loadgen-node",
                                uint32_t(&w - workers.data()),
                                uint32_t(o.workers),
                                pid,
                                std::span<const uint32_t>(&pid, 1)};
        size_t len = bpftrain::wire::encodeHello(std::span<uint8_t>(buf, kBuf), w.sender_id,
                                                 w.sequence++, h);
        iovs[n] = iovec{buf, len};
        msgs[n].msg_hdr = msghdr{};
        msgs[n].msg_hdr.msg_iov = &iovs[n];
        msgs[n].msg_hdr.msg_iovlen = 1;
        if (++n == kBatch) {
          sendBatch(fds[s], n, true);
          n = 0;
        }
      }
      if (n > 0) sendBatch(fds[s], n, true);
    }
  };

  // Renders worker w's datagram for its current tick into buf; returns its length.
  SampleRecord recs[bpftrain::wire::kMaxSamplesPerFrame];
  auto render = [&](uint8_t* buf, Worker& w, uint64_t tick, uint16_t* counts, double* sums) {
    size_t len = 0;
    uint32_t rank = uint32_t(&w - workers.data());
    for (int k = 0; k < o.per_datagram; ++k) {
      size_t m = size_t(tick + k) % kMetricCount;
      // Deterministic values: timers 1..100 ms, gauges the rank, counters 1.
      double ms = double((tick + k) % 100 + 1);
      double value = kMetrics[m].type == SampleType::kTimer   ? ms / 1000.0
                     : kMetrics[m].type == SampleType::kGauge ? double(rank)
                                                              : 1.0;
      ++counts[m];
      sums[m] += value;
      if (o.statsd) {
        char* p = reinterpret_cast<char*>(buf) + len;
        int n = std::snprintf(p, kBuf - len, "%s:%g|%s|#rank:%u\n", kMetrics[m].statsd_name,
                              kMetrics[m].type == SampleType::kTimer ? ms : value,
                              kMetrics[m].statsd_type, rank);
        len += size_t(n);
      } else {
        recs[k] = SampleRecord{kMetrics[m].id, kMetrics[m].type, 0, uint32_t(k), value};
      }
    }
    if (!o.statsd) {
      len = bpftrain::wire::encodeSamples(
          std::span<uint8_t>(buf, kBuf), w.sender_id, 0, 0,
          std::span<const SampleRecord>(recs, size_t(o.per_datagram)));
    }
    return len;
  };

  // A worker's datagrams repeat every `cycle` datagrams (values cycle over 300 samples), so when
  // it fits in 64 MiB they are rendered once and copied per send: the generator then costs
  // little more than the sendmmsg calls, and the collector is what the benchmark measures.
  struct Rendered {
    std::vector<uint8_t> bytes;
    uint16_t counts[kMetricCount] = {};
    double sums[kMetricCount] = {};
  };
  const size_t cycle = 300 / std::gcd<size_t>(300, size_t(o.per_datagram));
  std::vector<std::vector<Rendered>> cache;
  if (size_t(o.workers) * cycle * size_t(o.per_datagram) * 48 <= (64u << 20)) {
    cache.resize(size_t(o.workers));
    for (size_t w = 0; w < cache.size(); ++w) {
      cache[w].resize(cycle);
      for (size_t c = 0; c < cycle; ++c) {
        Rendered& r = cache[w][c];
        std::vector<uint8_t> tmp(kBuf);
        r.bytes.assign(tmp.begin(),
                       tmp.begin() + long(render(tmp.data(), workers[w], c * size_t(o.per_datagram),
                                                 r.counts, r.sums)));
      }
    }
  }

  // Fills datagram slot i with worker w's next datagram.
  auto fill = [&](int i, Worker& w) {
    uint8_t* buf = storage.data() + size_t(i) * kBuf;
    size_t len;
    if (!cache.empty()) {
      const Rendered& r =
          cache[size_t(&w - workers.data())][(w.tick / size_t(o.per_datagram)) % cycle];
      std::memcpy(buf, r.bytes.data(), r.bytes.size());
      std::copy(std::begin(r.counts), std::end(r.counts), batch_counts[i]);
      std::copy(std::begin(r.sums), std::end(r.sums), batch_sums[i]);
      len = r.bytes.size();
    } else {
      std::fill(std::begin(batch_counts[i]), std::end(batch_counts[i]), 0);
      std::fill(std::begin(batch_sums[i]), std::end(batch_sums[i]), 0.0);
      len = render(buf, w, w.tick, batch_counts[i], batch_sums[i]);
    }
    if (!o.statsd) bpftrain::wire::putU32(buf + 16, w.sequence++);  // header: sequence
    w.tick += uint64_t(o.per_datagram);
    iovs[i] = iovec{buf, len};
    msgs[i].msg_hdr = msghdr{};
    msgs[i].msg_hdr.msg_iov = &iovs[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
  };

  double datagram_rate = o.rate > 0 ? o.rate / o.per_datagram : o.workers * o.hz;
  uint64_t total = uint64_t(std::llround(datagram_rate * o.duration_s));
  sendHellos();
  auto start = Clock::now();
  auto last_hello = start;
  uint64_t next = 0;  // index of the next datagram; datagram j belongs to worker j % workers
  while (next < total) {
    auto now = Clock::now();
    double elapsed = std::chrono::duration<double>(now - start).count();
    uint64_t due = std::min<uint64_t>(total, uint64_t(elapsed * datagram_rate) + 1);
    if (now - last_hello > std::chrono::seconds(2)) {  // collectors forget nothing, but restart
      sendHellos();
      last_hello = now;
    }
    if (next >= due) {
      auto wake = start + std::chrono::duration_cast<Clock::duration>(
                              std::chrono::duration<double>(double(next) / datagram_rate));
      std::this_thread::sleep_until(std::min(wake, now + std::chrono::milliseconds(50)));
      continue;
    }
    // One sendmmsg per run of consecutive datagrams whose workers share a socket.
    int n = 0;
    int sock = workers[next % o.workers].socket;
    while (next < due && n < kBatch && workers[next % o.workers].socket == sock) {
      fill(n++, workers[next % o.workers]);
      ++next;
    }
    sendBatch(fds[size_t(sock)], n, false);
  }
  double took = std::chrono::duration<double>(Clock::now() - start).count();
  for (int fd : fds) close(fd);

  nlohmann::json out;
  out["protocol"] = o.statsd ? "statsd" : "binary";
  out["workers"] = o.workers;
  out["datagrams"] = datagrams;
  out["hellos"] = hellos;
  out["samples"] = samples;
  out["send_errors"] = send_errors;
  out["seconds"] = took;
  out["samples_per_second"] = took > 0 ? double(samples) / took : 0.0;
  nlohmann::json metrics = nlohmann::json::object();
  for (size_t m = 0; m < kMetricCount; ++m) {
    std::string name = o.statsd ? kMetrics[m].prom_name
                                : std::string(bpftrain::wire::metricInfo(kMetrics[m].id).name);
    metrics[name] = {{"count", sent_count[m]}, {"sum", sent_sum[m]}};
  }
  out["metrics"] = metrics;
  std::printf("%s\n", out.dump().c_str());
  return send_errors == 0 ? 0 : 1;
}
