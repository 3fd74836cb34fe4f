// Real StatsD clients against the real collector: Debian's python3-statsd and npm's DogStatsD
// client hot-shots (installed by statsd_clients/install-hot-shots into the build tree) send what
// statsd_clients/*.{py,js} say, and every resulting series is checked exactly in /metrics.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/collector_process.h"
#include "tests/support/requirements.h"

namespace bpftrain {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;

const std::string kClients =
    std::string(BPFTRAIN_SOURCE_DIR) + "/tests/collector/ingest/statsd_clients";

double get(const testing::CollectorProcess::Metrics& m, const std::string& k) {
  auto it = m.find(k);
  return it == m.end() ? NAN : it->second;
}

// Two ingest threads: gauge deltas and set members must agree whichever socket they come through.
testing::CollectorProcess startCollector() {
  return testing::CollectorProcess(
      {"--no-bpf", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--window", "60s",
       "--step", "1s", "--ingest-threads", "2"},
      20s);
}

void runClient(std::vector<std::string> argv) {
  ChildProcess c(argv);
  ASSERT_TRUE(c.waitFor("sent", 60s)) << argv[0] << ": " << c.err;
  ASSERT_EQ(c.exitCode(10s), 0) << c.err;
}

TEST(StatsdClientsE2E, PythonStatsd) {
  if (::access("/usr/bin/python3", X_OK) != 0) GTEST_FAIL() << "/usr/bin/python3: run tools/setup";
  {
    ChildProcess probe({"/usr/bin/python3", "-c", "import statsd"});
    if (probe.exitCode(20s) != 0) GTEST_FAIL() << "python3-statsd missing: run tools/setup";
  }
  auto col = startCollector();
  ASSERT_GT(col.udp_port, 0);
  runClient({"/usr/bin/python3", kClients + "/python_client.py", std::to_string(col.udp_port)});
  const std::string s = "bpftrain_collector_samples_total{protocol=\"statsd\"}";
  auto m = col.scrapeUntil([&](const auto& m) { return get(m, s) >= 19; });
  EXPECT_EQ(get(m, s), 19);  // 20 lines, one a negative counter
  EXPECT_EQ(get(m, "bpftrain_collector_decode_errors_total{reason=\"bad_value\"}"), 1);
  EXPECT_EQ(get(m, "py_requests_total"), 5);  // 1 + 4; decr() is a negative counter, refused
  EXPECT_EQ(get(m, "py_queue"), 9);           // 10, +3, -5, then +1 in the pipeline
  EXPECT_EQ(get(m, "py_temp"), -4);           // the client's "0|g" then "-4|g" for a negative
  EXPECT_EQ(get(m, "py_users"), 4);           // alice, bob, carol, dave
  EXPECT_EQ(get(m, "py_latency_count"), 2);
  EXPECT_DOUBLE_EQ(get(m, "py_latency_sum"), 1.0);  // 250 ms + 750 ms
  EXPECT_EQ(get(m, "py_batched_total"), 2);
  EXPECT_EQ(get(m, "py_librato_total{env=\"prod\",host=\"h1\"}"), 5);
  EXPECT_EQ(get(m, "py_influx_total{env=\"prod\",host=\"h2\"}"), 6);
  EXPECT_EQ(get(m, "py_signalfx_count_total{env=\"prod\",host=\"h3\"}"), 7);
}

TEST(StatsdClientsE2E, HotShotsDogStatsd) {
  BPFTRAIN_REQUIRE_TOOL("node");
  const std::string dir = testing::buildPath("npm");
  {
    ChildProcess install({"/bin/bash", kClients + "/install-hot-shots", dir});
    int rc = install.exitCode(120s);
    if (rc != 0)
      BPFTRAIN_SKIP_OR_FAIL_UNDER_CI(
          "npm install hot-shots failed (no registry?): " << install.err);
  }
  auto col = startCollector();
  ASSERT_GT(col.udp_port, 0);
  runClient({"/usr/bin/env", "NODE_PATH=" + dir + "/node_modules", "node",
             kClients + "/hot_shots_client.js", std::to_string(col.udp_port)});
  const std::string s = "bpftrain_collector_samples_total{protocol=\"statsd\"}";
  auto m = col.scrapeUntil([&](const auto& m) {
    return get(m, s) >= 13 &&
           get(m, "bpftrain_collector_statsd_ignored_total{reason=\"service_check\"}") >= 1;
  });
  EXPECT_EQ(get(m, s), 13);
  const std::string dd = "container_id=\"c0ffee\",env=\"prod\"";
  EXPECT_EQ(get(m, "js_requests_total{" + dd + ",route=\"/a\"}"), 5);  // "canary" tag dropped
  EXPECT_EQ(get(m, "js_queue{" + dd + "}"), 6);                        // 10, then -4
  EXPECT_EQ(get(m, "js_users{" + dd + "}"), 2);                        // u1, u2, u1
  EXPECT_EQ(get(m, "js_size_count{" + dd + "}"), 2);                   // |h and |d
  EXPECT_EQ(get(m, "js_size_sum{" + dd + "}"), 400);
  EXPECT_DOUBLE_EQ(get(m, "js_latency_sum{" + dd + "}"), 0.04);
  EXPECT_EQ(get(m, "js_stamped_total{" + dd + "}"), 1);  // |T timestamp accepted
  EXPECT_EQ(get(m, "tg_hits_total{code=\"200\",region=\"eu\"}"), 5);
  EXPECT_EQ(get(m, "tg_temp{region=\"eu\"}"), 21.5);
  EXPECT_EQ(get(m, "bpftrain_collector_statsd_ignored_total{reason=\"event\"}"), 1);
  EXPECT_EQ(get(m, "bpftrain_collector_statsd_ignored_total{reason=\"service_check\"}"), 1);
  EXPECT_EQ(get(m, "bpftrain_collector_statsd_ignored_total{reason=\"valueless_tag\"}"), 1);
  double errors = 0;
  for (const auto& [k, v] : m)
    if (k.rfind("bpftrain_collector_decode_errors_total", 0) == 0) errors += v;
  EXPECT_EQ(errors, 0);
}

}  // namespace
}  // namespace bpftrain
