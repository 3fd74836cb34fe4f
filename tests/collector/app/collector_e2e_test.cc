// The collector binary on port 0 driven by the load generator over loopback; /metrics scraped
// over HTTP and compared with what the load generator says it sent, exactly.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <thread>

#include "common/wire_format.h"
#include "tests/support/catalogue_check.h"
#include "tests/support/child_process.h"
#include "tests/support/collector_process.h"

namespace bpftrain {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;

// The e2e defaults: no BPF, loopback port 0, 60 s window in 1 s steps; `extra` comes last.
struct Collector : testing::CollectorProcess {
  explicit Collector(std::vector<std::string> extra = {})
      : CollectorProcess(withDefaults(std::move(extra)), 20s) {}
  static std::vector<std::string> withDefaults(std::vector<std::string> extra) {
    std::vector<std::string> args = {"--no-bpf",  "--listen",    "127.0.0.1:0",
                                     "--metrics", "127.0.0.1:0", "--window",
                                     "60s",       "--step",      "1s"};
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  }
};

nlohmann::json runLoadgen(int udp_port, std::vector<std::string> args) {
  std::vector<std::string> argv = {testing::buildPath("collector/app/bpftrain-loadgen"), "--target",
                                   "127.0.0.1:" + std::to_string(udp_port)};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess lg(argv);
  auto line = lg.waitLine(std::regex("^\\{.*\\}$"), 60s);
  EXPECT_EQ(lg.exitCode(10s), 0) << lg.err;
  if (!line) return {};
  return nlohmann::json::parse((*line)[0].str());
}

double sumMatching(const std::map<std::string, double>& m, const std::string& prefix) {
  double s = 0;
  for (const auto& [k, v] : m)
    if (k.rfind(prefix, 0) == 0) s += v;
  return s;
}

double get(const std::map<std::string, double>& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? NAN : it->second;
}

TEST(CollectorE2E, BinaryFramesAggregatedExactly) {
  Collector c;
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  auto sent = runLoadgen(c.udp_port, {"--workers", "8", "--hz", "100", "--duration", "1.5"});
  ASSERT_FALSE(sent.is_null());
  uint64_t samples = sent["samples"];
  ASSERT_GT(samples, 0u);
  auto m = c.scrapeUntil([&](const auto& m) {
    return get(m, "bpftrain_collector_samples_total{protocol=\"binary\"}") >= double(samples);
  });
  EXPECT_EQ(get(m, "bpftrain_collector_samples_total{protocol=\"binary\"}"), double(samples));
  EXPECT_EQ(get(m, "bpftrain_collector_kernel_drops_total"), 0);
  EXPECT_EQ(get(m, "bpftrain_collector_frames_lost_total"), 0);
  EXPECT_EQ(get(m, "bpftrain_collector_dropped_total{reason=\"unknown_sender\"}"), 0);
  EXPECT_EQ(get(m, "bpftrain_collector_senders"), 8);
  const auto& per = sent["metrics"];
  EXPECT_EQ(sumMatching(m, "bpftrain_allreduce_bytes_total{"),
            double(per["bpftrain_allreduce_bytes"]["count"]));
  EXPECT_EQ(sumMatching(m, "bpftrain_step_seconds_count{"),
            double(per["bpftrain_step_seconds"]["count"]));
  EXPECT_NEAR(sumMatching(m, "bpftrain_step_seconds_sum{"),
              double(per["bpftrain_step_seconds"]["sum"]),
              1e-9 * double(per["bpftrain_step_seconds"]["sum"]));
  for (int r = 0; r < 8; ++r)  // gauges: the last value, which the generator sets to the rank
    EXPECT_EQ(get(m, "bpftrain_loss{job=\"loadgen\",rank=\"" + std::to_string(r) + "\"}"), r);
  // Every bpftrain_ series (the ranks' and the collector's own) is declared, with its labels.
  for (const std::string& problem : testing::catalogueMismatches(m)) ADD_FAILURE() << problem;
}

TEST(CollectorE2E, StatsdLinesAggregatedExactly) {
  Collector c;
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  auto sent = runLoadgen(c.udp_port, {"--protocol", "statsd", "--rate", "200000", "--workers", "16",
                                      "--duration", "1"});
  ASSERT_FALSE(sent.is_null());
  uint64_t samples = sent["samples"];
  auto m = c.scrapeUntil([&](const auto& m) {
    return get(m, "bpftrain_collector_samples_total{protocol=\"statsd\"}") >= double(samples);
  });
  EXPECT_EQ(get(m, "bpftrain_collector_samples_total{protocol=\"statsd\"}"), double(samples));
  EXPECT_EQ(get(m, "bpftrain_collector_kernel_drops_total"), 0);
  const auto& per = sent["metrics"];
  EXPECT_EQ(sumMatching(m, "loadgen_bytes_total{"), double(per["loadgen_bytes"]["count"]));
  EXPECT_EQ(sumMatching(m, "loadgen_step_count{"), double(per["loadgen_step"]["count"]));
  EXPECT_NEAR(sumMatching(m, "loadgen_step_sum{"), double(per["loadgen_step"]["sum"]),
              1e-9 * double(per["loadgen_step"]["sum"]));
}

TEST(CollectorE2E, GarbageIsCountedAndValidTrafficStillExact) {
  Collector c;
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(c.udp_port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  std::mt19937 rng(7);
  constexpr int kGarbage = 2000;
  for (int i = 0; i < kGarbage; ++i) {
    uint8_t b[256];
    size_t n = 1 + rng() % sizeof b;
    for (size_t k = 0; k < n; ++k) b[k] = uint8_t(rng());
    if (i % 2) wire::putU32(b, wire::kMagic);  // half look like frames: header checks reject
    if (n < 4) b[0] = 0xff;
    sendto(fd, b, n, 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
  }
  close(fd);
  auto sent = runLoadgen(c.udp_port, {"--workers", "4", "--hz", "100", "--duration", "0.5"});
  uint64_t samples = sent["samples"];
  auto m = c.scrapeUntil([&](const auto& m) {
    return get(m, "bpftrain_collector_samples_total{protocol=\"binary\"}") >= double(samples);
  });
  EXPECT_EQ(get(m, "bpftrain_collector_samples_total{protocol=\"binary\"}"), double(samples));
  EXPECT_GE(sumMatching(m, "bpftrain_collector_decode_errors_total{"), kGarbage);
  EXPECT_EQ(sumMatching(m, "bpftrain_allreduce_bytes_total{"),
            double(sent["metrics"]["bpftrain_allreduce_bytes"]["count"]));
}

TEST(CollectorE2E, SigtermStopsPromptlyWithStatusZero) {
  Collector c;
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  ASSERT_EQ(kill(c.proc->pid(), SIGTERM), 0);
  EXPECT_EQ(c.proc->exitCode(5s), 0) << c.proc->err;
  EXPECT_NE(c.proc->err.find("stopped"), std::string::npos);
}

TEST(CollectorE2E, SighupReloadsTheConfigFile) {
  std::string path = ::testing::TempDir() + "/collector_reload.json";
  std::ofstream(path) << R"({"log_level": "info", "max_series": 1000})";
  Collector c({"--config", path});
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  std::ofstream(path) << R"({"log_level": "debug", "max_series": 2000})";
  ASSERT_EQ(kill(c.proc->pid(), SIGHUP), 0);
  auto line = c.proc->waitLine(std::regex("SIGHUP: reloaded .*"), 10s, true);
  ASSERT_TRUE(line) << c.proc->err;
  EXPECT_NE((*line)[0].str().find("applied: log_level"), std::string::npos) << (*line)[0];
  EXPECT_NE((*line)[0].str().find("needs a restart: max_series"), std::string::npos) << (*line)[0];
  auto m = c.scrapeUntil(
      [](const auto& m) { return get(m, "bpftrain_collector_reloads_total{result=\"ok\"}") == 1; });
  EXPECT_EQ(get(m, "bpftrain_collector_reloads_total{result=\"ok\"}"), 1);
  // A broken file is reported and the collector keeps running on the old config.
  std::ofstream(path) << R"({"log_level": "loud"})";
  ASSERT_EQ(kill(c.proc->pid(), SIGHUP), 0);
  EXPECT_TRUE(c.proc->waitLine(std::regex("reload failed.*log_level"), 10s, true)) << c.proc->err;
  ASSERT_EQ(kill(c.proc->pid(), SIGTERM), 0);
  EXPECT_EQ(c.proc->exitCode(5s), 0);
  std::remove(path.c_str());
}

struct BadConfig {
  std::string file;  // JSON written to a temp file, "" for none
  std::vector<std::string> flags;
  std::string must_name;  // the key or flag the one-line error must name
};

TEST(CollectorE2E, ConfigMistakesExitTwoWithOneLineNamingTheKey) {
  std::string path = ::testing::TempDir() + "/collector_bad.json";
  std::vector<BadConfig> cases = {
      {R"({"listen": "127.0.0.1:0", "windw": "5s"})", {}, "windw"},
      {R"({"window": "five seconds"})", {}, "window"},
      {R"({"ingest_threads": 0})", {}, "ingest_threads"},
      {R"({"no_bpf": "yes"})", {}, "no_bpf"},
      {R"([1,2])", {}, "--config"},
      {"", {"--window", "abc"}, "--window"},
      {"", {"--listen", "localhost"}, "--listen"},
      {"", {"--policy", "random"}, "--policy"},
      {"", {"--max-series", "-5"}, "--max-series"},
      {"", {"--bogus"}, "--bogus"},
      {"", {"--window", "5s", "--step", "3s"}, "--window/--step"},
  };
  for (const auto& bc : cases) {
    std::vector<std::string> argv = {testing::buildPath("collector/app/bpftrain-collector"),
                                     "--no-bpf"};
    if (!bc.file.empty()) {
      std::ofstream(path) << bc.file;
      argv.insert(argv.end(), {"--config", path});
    }
    argv.insert(argv.end(), bc.flags.begin(), bc.flags.end());
    ChildProcess p(argv);
    EXPECT_EQ(p.exitCode(10s), 2) << bc.must_name;
    const std::string& err = p.err;
    EXPECT_NE(err.find(bc.must_name), std::string::npos) << err;
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  }
  std::remove(path.c_str());
}

TEST(CollectorE2E, VersionPrintsOneLineAndExitsZero) {
  ChildProcess p({testing::buildPath("collector/app/bpftrain-collector"), "--version"});
  EXPECT_EQ(p.exitCode(10s), 0);
  EXPECT_EQ(p.out.rfind("bpftrain-collector ", 0), 0u) << p.out;
  EXPECT_NE(p.out.find_first_of("0123456789"), std::string::npos) << p.out;
  EXPECT_EQ(std::count(p.out.begin(), p.out.end(), '\n'), 1) << p.out;
}

TEST(CollectorE2E, AWildcardListenerIsWarnedAbout) {
  Collector loopback;
  ASSERT_GT(loopback.udp_port, 0) << loopback.proc->err;
  EXPECT_EQ(loopback.proc->err.find("every interface"), std::string::npos) << loopback.proc->err;
  Collector c({"--listen", "0.0.0.0:0"});
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  EXPECT_TRUE(c.proc->waitFor("--listen 0.0.0.0:0 listens on every interface", 5s)) << c.proc->err;
}

TEST(CollectorE2E, FlagsOverrideTheFile) {
  std::string path = ::testing::TempDir() + "/collector_override.json";
  std::ofstream(path) << R"({"window": "10s", "step": "2s", "listen": "127.0.0.1:1"})";
  Collector c({"--config", path, "--listen", "127.0.0.1:0", "--step", "1s", "--window", "60s"});
  ASSERT_GT(c.udp_port, 1) << c.proc->err;
  EXPECT_NE(c.proc->out.find("window=60000ms step=1000ms"), std::string::npos) << c.proc->out;
  std::remove(path.c_str());
}

void sendStatsd(int port, const std::string& text) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_port = htons(uint16_t(port));
  to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
            ssize_t(text.size()));
  close(fd);
}

// --series-ttl: a job that stopped sending leaves /metrics (counted as expired); when it sends
// again its series is back, new (the ingest thread's cached id was looked up again).
TEST(CollectorE2E, SeriesOfAJobThatStoppedExpireAndComeBack) {
  Collector c({"--window", "2s", "--step", "250ms", "--series-ttl", "1s"});
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  const std::string series = "ttl_probe_total{job=\"gone\"}";
  sendStatsd(c.udp_port, "ttl.probe:1|c|#job:gone");
  auto m = c.scrapeUntil([&](const auto& m) { return get(m, series) == 1; });
  ASSERT_EQ(get(m, series), 1);
  m = c.scrapeUntil([&](const auto& m) { return !m.count(series); });
  EXPECT_FALSE(m.count(series));
  EXPECT_GE(get(m, "bpftrain_collector_series_expired_total"), 1);
  sendStatsd(c.udp_port, "ttl.probe:2|c|#job:gone");
  m = c.scrapeUntil([&](const auto& m) { return get(m, series) == 2; });
  EXPECT_EQ(get(m, series), 2);  // a new series: the old total is gone with it
}

// Hierarchy: two child collectors forward window summaries to a parent (--upstream); the
// parent's quantiles over the union stay within the sketch's 1% relative error of the exact ones.
TEST(CollectorE2E, TwoChildrenMergeIntoParentWithinSketchBound) {
  Collector parent;
  ASSERT_GT(parent.udp_port, 0) << parent.proc->err;
  std::string up = "127.0.0.1:" + std::to_string(parent.udp_port);
  Collector child_a({"--upstream", up});
  Collector child_b({"--upstream", up});
  ASSERT_GT(child_a.udp_port, 0) << child_a.proc->err;
  ASSERT_GT(child_b.udp_port, 0) << child_b.proc->err;

  std::mt19937 rng(42);
  std::lognormal_distribution<double> slow(3.0, 0.6);  // ms, child a
  std::uniform_real_distribution<double> fast(1, 15);  // ms, child b
  std::vector<double> all_seconds;
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  for (Collector* c : {&child_a, &child_b}) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(c->udp_port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    for (int d = 0; d < 100; ++d) {  // 100 datagrams x 20 lines
      std::string text;
      for (int i = 0; i < 20; ++i) {
        double ms = c == &child_a ? slow(rng) : fast(rng);
        char line[64];
        int n = std::snprintf(line, sizeof line, "hier.lat:%.6f|ms\nhier.n:1|c\n", ms);
        text.append(line, size_t(n));
        all_seconds.push_back(std::strtod(line + 9, nullptr) / 1000.0);
      }
      sendto(fd, text.data(), text.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a);
    }
  }
  close(fd);
  const double n = double(all_seconds.size());
  auto m = parent.scrapeUntil([&](const auto& m) { return get(m, "hier_lat_count") >= n; }, 30s);
  ASSERT_EQ(get(m, "hier_lat_count"), n) << parent.proc->err;
  EXPECT_EQ(get(m, "hier_n_total"), n);
  std::sort(all_seconds.begin(), all_seconds.end());
  for (double q : {0.5, 0.9, 0.99}) {
    double rank = q * (n - 1);
    double lo = all_seconds[size_t(std::floor(rank))] * 0.99;
    double hi = all_seconds[size_t(std::ceil(rank))] * 1.01;
    char key[64];
    std::snprintf(key, sizeof key, "hier_lat{quantile=\"%g\"}", q);
    double got = get(m, key);
    EXPECT_GE(got, lo) << key;
    EXPECT_LE(got, hi) << key;
  }
}

}  // namespace
}  // namespace bpftrain
