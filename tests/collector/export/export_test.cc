#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <prometheus/counter.h>
#include <prometheus/registry.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <sstream>
#include <string>

#include "collector/export/metrics_server.h"
#include "collector/export/window_collectable.h"
#include "common/host_port.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::exporter {
namespace {

using window::Label;
using window::SeriesKind;
using window::SeriesStore;

constexpr int64_t kMs = 1'000'000;
constexpr int64_t kSec = 1'000'000'000;

// A plain HTTP/1.0 GET over a socket, with a deadline on every wait.
std::string httpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(uint16_t(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0) {
    std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, req.data(), req.size(), MSG_NOSIGNAL) == ssize_t(req.size())) {
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      char buf[65536];
      while (std::chrono::steady_clock::now() < deadline) {
        pollfd p{fd, POLLIN, 0};
        if (poll(&p, 1, 100) <= 0) continue;
        ssize_t n = recv(fd, buf, sizeof buf, 0);
        if (n <= 0) break;
        out.append(buf, size_t(n));
      }
    }
  }
  close(fd);
  return out;
}

// "name{labels}" -> value, from the exposition body.
std::map<std::string, double> parse(const std::string& response) {
  std::map<std::string, double> out;
  size_t body = response.find("\r\n\r\n");
  std::istringstream in(body == std::string::npos ? "" : response.substr(body + 4));
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    size_t space = line.rfind(' ');
    out[line.substr(0, space)] = std::strtod(line.c_str() + space + 1, nullptr);
  }
  return out;
}

// le bound -> cumulative count of one histogram series, from parse()'s map; `prefix` is
// name{labels without the closing brace.
std::map<double, double> histogramBuckets(const std::map<std::string, double>& m,
                                          const std::string& prefix) {
  std::map<double, double> out;
  const std::string le = prefix + ",le=\"";
  for (const auto& [key, value] : m)
    if (key.rfind(le, 0) == 0) out[std::strtod(key.c_str() + le.size(), nullptr)] = value;
  return out;
}

TEST(Export, ScrapeOverHttpShowsExactValues) {
  window::WindowConfig config;
  config.window = std::chrono::seconds(5);
  config.step = std::chrono::milliseconds(500);
  config.writers = 2;
  auto store = SeriesStore::create(config);
  Label labels[] = {{"rank", "0"}, {"job", "demo"}};
  auto c = store->lookup("bpftrain_allreduce_bytes", labels, SeriesKind::kCounter);
  auto g = store->lookup("bpftrain_loss", labels, SeriesKind::kGauge);
  auto d = store->lookup("bpftrain_step_seconds", labels, SeriesKind::kDistribution);
  Label odd[] = {{"path", "a\"b\\c"}};
  auto e = store->lookup("bpftrain_odd", odd, SeriesKind::kGauge);
  const int64_t t0 = 3000 * kSec;
  for (int i = 1; i <= 1000; ++i) {
    int64_t t = t0 + i * kMs;
    store->record(i % 2, c, 4096, t);
    store->record(i % 2, g, 1.0 / i, t);
    store->record(i % 2, d, i * 0.001, t);  // 1 ms .. 1 s
  }
  store->record(0, e, 7, t0);

  WindowCollectableOptions options;
  options.clock = [&] { return t0 + 1500 * kMs; };
  auto collectable = std::make_shared<WindowCollectable>(*store, options);
  std::string error;
  auto server = MetricsServer::start("127.0.0.1:0", error);
  ASSERT_TRUE(server) << error;
  EXPECT_GT(server->port(), 0);
  EXPECT_EQ(server->url(), "http://127.0.0.1:" + std::to_string(server->port()) + "/metrics");
  server->add(collectable);

  std::string response = httpGet(server->port(), "/metrics");
  ASSERT_NE(response.find("200 OK"), std::string::npos) << response;
  EXPECT_NE(response.find("# TYPE bpftrain_allreduce_bytes_total counter"), std::string::npos);
  EXPECT_NE(response.find("# TYPE bpftrain_loss gauge"), std::string::npos);
  EXPECT_NE(response.find("# TYPE bpftrain_step_seconds summary"), std::string::npos);
  auto m = parse(response);
  const std::string l = "{job=\"demo\",rank=\"0\"";
  EXPECT_EQ(m["bpftrain_allreduce_bytes_total" + l + "}"], 4096.0 * 1000);
  EXPECT_EQ(m["bpftrain_loss" + l + "}"], 1.0 / 1000);
  EXPECT_EQ(m["bpftrain_step_seconds_count" + l + "}"], 1000);
  EXPECT_NEAR(m["bpftrain_step_seconds_sum" + l + "}"], 500.5, 1e-9);
  const double exact[] = {0.500, 0.900, 0.990};  // sample floor(q * 999) + 1, in ms / 1000
  int i = 0;
  for (const char* q : {"0.5", "0.9", "0.99"}) {
    std::string key = "bpftrain_step_seconds" + l + ",quantile=\"" + q + "\"}";
    ASSERT_TRUE(m.count(key)) << key << "\n" << response;
    EXPECT_LE(std::abs(m[key] - exact[i]), 0.01 * exact[i]) << key;
    ++i;
  }
  // The same samples as a cumulative histogram with the catalogue's bounds; `le` as Prometheus
  // compares it (the first bound >= the value), every bound and +Inf present.
  EXPECT_NE(response.find("# TYPE bpftrain_step_seconds_hist histogram"), std::string::npos);
  const auto buckets = histogramBuckets(m, "bpftrain_step_seconds_hist_bucket" + l);
  ASSERT_EQ(buckets.size(), metrics::kStepSeconds.buckets.size() + 1) << response;
  for (double bound : metrics::kStepSeconds.buckets) {
    uint64_t want = 0;
    for (int i = 1; i <= 1000; ++i) want += i * 0.001 <= bound;
    ASSERT_TRUE(buckets.count(bound)) << bound;
    EXPECT_EQ(buckets.at(bound), double(want)) << "le=" << bound;
  }
  EXPECT_EQ(buckets.at(std::numeric_limits<double>::infinity()), 1000);
  EXPECT_EQ(m["bpftrain_step_seconds_hist_count" + l + "}"], 1000);
  EXPECT_NEAR(m["bpftrain_step_seconds_hist_sum" + l + "}"], 500.5, 1e-9);
  EXPECT_EQ(m["bpftrain_odd{path=\"a\\\"b\\\\c\"}"], 7) << response;
  EXPECT_EQ(m["bpftrain_collector_series"], 4);
  EXPECT_EQ(m["bpftrain_collector_series_rejected_total"], 0);
  EXPECT_GT(m["bpftrain_collector_window_memory_bytes"], 0);

  // Extra collectables (the app's self-metrics) join the same endpoint.
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildCounter()
      .Name("bpftrain_test_extra_total")
      .Help("x")
      .Register(*registry)
      .Add({})
      .Increment(3);
  server->add(registry);
  m = parse(httpGet(server->port(), "/metrics"));
  EXPECT_EQ(m["bpftrain_test_extra_total"], 3);
  EXPECT_EQ(m["bpftrain_allreduce_bytes_total" + l + "}"], 4096.0 * 1000);

  // After the window has passed: totals and last values stay, window figures empty.
  options.clock = [&] { return t0 + 60 * kSec; };
  server->add(std::make_shared<WindowCollectable>(*store, options));
  server->remove(collectable);
  server->remove(registry);
  m = parse(httpGet(server->port(), "/metrics"));
  EXPECT_EQ(m["bpftrain_allreduce_bytes_total" + l + "}"], 4096.0 * 1000);
  EXPECT_EQ(m["bpftrain_step_seconds_count" + l + "}"], 0);
  EXPECT_TRUE(std::isnan(m["bpftrain_step_seconds" + l + ",quantile=\"0.5\"}"]));
  // The histogram is cumulative: it does not slide with the window.
  EXPECT_EQ(m["bpftrain_step_seconds_hist_count" + l + "}"], 1000);
  EXPECT_EQ(m["bpftrain_step_seconds_hist_bucket" + l + ",le=\"+Inf\"}"], 1000);
  EXPECT_EQ(m.count("bpftrain_test_extra_total"), 0u);
}

TEST(Export, KindConflictsAreSkippedAndCounted) {
  auto store = SeriesStore::create({});
  Label a[] = {{"k", "a"}};
  Label b[] = {{"k", "b"}};
  store->lookup("bpftrain_x_total", a, SeriesKind::kGauge);
  store->lookup("bpftrain_x", b, SeriesKind::kCounter);  // exported as bpftrain_x_total too
  WindowCollectable collectable(*store);
  auto families = collectable.Collect();
  EXPECT_EQ(collectable.kindConflicts(), 1u);
  size_t x = 0;
  for (auto& f : families)
    if (f.name == "bpftrain_x_total") x += f.metric.size();
  EXPECT_EQ(x, 1u);
  EXPECT_EQ(exportedName("bpftrain_y", SeriesKind::kCounter), "bpftrain_y_total");
  EXPECT_EQ(exportedName("bpftrain_y_total", SeriesKind::kCounter), "bpftrain_y_total");
  EXPECT_EQ(exportedName("bpftrain_y", SeriesKind::kGauge), "bpftrain_y");
}

TEST(MetricsServer, PortZeroGivesDistinctPortsAndBadAddressesNameTheFix) {
  std::string error;
  auto a = MetricsServer::start("127.0.0.1:0", error);
  auto b = MetricsServer::start("localhost:0", error);
  ASSERT_TRUE(a) << error;
  ASSERT_TRUE(b) << error;
  EXPECT_NE(a->port(), b->port());
  // The port a already holds.
  auto taken = MetricsServer::start("127.0.0.1:" + std::to_string(a->port()), error);
  EXPECT_FALSE(taken);
  EXPECT_NE(error.find("--metrics HOST:PORT"), std::string::npos) << error;
  for (const char* bad : {"127.0.0.1", "127.0.0.1:99999", ":80", "127.0.0.1:x", "[::1:80"}) {
    error.clear();
    EXPECT_FALSE(MetricsServer::start(bad, error)) << bad;
    EXPECT_NE(error.find("HOST:PORT"), std::string::npos) << bad << ": " << error;
  }
  auto v6 = parseHostPort("[::1]:9471", PortZero::kAllowed, error);
  ASSERT_TRUE(v6) << error;
  EXPECT_EQ(v6->host, "::1");
  EXPECT_EQ(v6->port, 9471);
}

}  // namespace
}  // namespace bpftrain::collector::exporter
