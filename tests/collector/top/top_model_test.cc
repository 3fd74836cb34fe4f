#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "collector/top/metrics_text.h"
#include "collector/top/model.h"
#include "collector/top/view.h"

namespace bpftrain::top {
namespace {

TEST(MetricsText, ParsesSamplesLabelsEscapesAndSpecialValues) {
  ParsedMetrics m = parseMetricsText(
      "# HELP x help\n# TYPE x gauge\nx 1\ny{a=\"1\",b=\"q\\\"u\\\\o\\n\"} 2.5e3\n"
      "z{} NaN\nw +Inf 1700000000\nbroken{a=1} 3\n\n");
  ASSERT_EQ(m.samples.size(), 4u);
  EXPECT_EQ(m.samples[0].name, "x");
  EXPECT_EQ(m.samples[0].value, 1);
  EXPECT_EQ(m.samples[1].label("a"), "1");
  EXPECT_EQ(m.samples[1].label("b"), "q\"u\\o\n");
  EXPECT_EQ(m.samples[1].value, 2500);
  EXPECT_TRUE(std::isnan(m.samples[2].value));
  EXPECT_TRUE(std::isinf(m.samples[3].value));
  EXPECT_EQ(m.bad_lines, 1u);
}

std::string scrape(double step, double decisions, double migrations) {
  auto n = [](double v) { return std::to_string(v); };
  return "bpftrain_samples_per_second{job=\"j\",rank=\"0\"} 1000\n"
         "bpftrain_samples_per_second{job=\"j\",rank=\"1\"} 900\n"
         "bpftrain_samples_per_second{job=\"other\",rank=\"0\"} 5\n"
         "bpftrain_step_seconds{job=\"j\",rank=\"10\",quantile=\"0.5\"} 0.01\n"
         "bpftrain_step_seconds{job=\"j\",rank=\"1\",quantile=\"0.99\"} 0.25\n"
         "bpftrain_step_seconds_sum{job=\"j\",rank=\"1\"} 10\n"
         "bpftrain_allreduce_seconds_sum{job=\"j\",rank=\"1\"} 4\n"
         "bpftrain_topology_info{job=\"j\",rank=\"0\",topology=\"ring\"} 0\n"
         "bpftrain_topology_info{job=\"j\",rank=\"0\",topology=\"bcube\"} 1\n"
         "bpftrain_step{job=\"j\",rank=\"0\"} " +
         n(step) +
         "\n"
         "bpftrain_migrations_total{job=\"j\",rank=\"0\",scope=\"cpu\"} " +
         n(migrations) +
         "\n"
         "bpftrain_migrations_total{job=\"j\",rank=\"1\",scope=\"cpu\"} " +
         n(migrations) +
         "\n"
         "bpftrain_controller_decisions_total{from=\"ring\",to=\"bcube\",reason=\"queue\"} " +
         n(decisions) +
         "\n"
         "bpftrain_transport_rtt_seconds{job=\"j\",rank=\"0\",transport=\"tcp\",quantile=\"0.99\"} "
         "0.002\n"
         "bpftrain_collector_samples_total{protocol=\"binary\"} " +
         n(100 * step) +
         "\n"
         "bpftrain_probe_up{probe=\"tcp\"} 1\nbpftrain_probe_up{probe=\"pmu\"} 0\n"
         "bpftrain_diagnosis_info{job=\"j\",cause=\"none\",rank=\"-1\",link=\"\"} 0\n"
         "bpftrain_diagnosis_info{job=\"j\",cause=\"congested_link\",rank=\"-1\",link=\"other_host:"
         "node1\"} 1\n";
}

TEST(TopModel, RanksRatesDecisionsAndHealth) {
  Model m;
  m.update(parseMetricsText(scrape(10, 1, 100)).samples, 0);
  const JobView& v1 = m.view();
  EXPECT_EQ(v1.job, "j");  // the first job by name
  EXPECT_EQ(v1.jobs, (std::vector<std::string>{"j", "other"}));
  ASSERT_EQ(v1.ranks.size(), 3u);  // 0, 1, 10 in numeric order
  EXPECT_EQ(v1.ranks[0].rank, "0");
  EXPECT_EQ(v1.ranks[2].rank, "10");
  EXPECT_EQ(v1.ranks[0].topology, "bcube");
  EXPECT_DOUBLE_EQ(v1.ranks[1].allreduce_share, 0.4);
  EXPECT_EQ(v1.samples_per_second, 1900);
  ASSERT_EQ(v1.host.size(), 1u);
  EXPECT_EQ(v1.host[0].parts[0].rate, -1);  // one scrape: no rate yet
  EXPECT_EQ(v1.decisions[0].last_change_s, -1);
  ASSERT_EQ(v1.diagnosis.size(), 1u);  // only the cause at 1
  EXPECT_EQ(v1.diagnosis[0].cause, "congested_link");

  m.update(parseMetricsText(scrape(20, 2, 150)).samples, 2);
  const JobView& v2 = m.view();
  EXPECT_EQ(v2.host[0].parts[0].label, "cpu");
  EXPECT_DOUBLE_EQ(v2.host[0].parts[0].rate, 50);  // (50 + 50) / 2 s over both ranks
  EXPECT_EQ(v2.host[0].parts[0].value, 300);
  EXPECT_DOUBLE_EQ(v2.health.samples_rate, 500);
  ASSERT_EQ(v2.decisions.size(), 1u);
  EXPECT_EQ(v2.decisions[0].count, 2);
  EXPECT_EQ(v2.decisions[0].last_change_s, 2);
  EXPECT_EQ(v2.health.probes_down, std::vector<std::string>{"pmu"});
  ASSERT_EQ(v2.transport.size(), 1u);
  EXPECT_FALSE(v2.transport[0].counter);
  EXPECT_EQ(v2.transport[0].parts[0].value, 0.002);
}

TEST(TopView, FitsTheTerminalAndSaysWhatIsHidden) {
  Model m("j");
  m.update(parseMetricsText(scrape(10, 1, 100)).samples, 0);
  Header h{"127.0.0.1:9471", 1, "", "12:00:00"};
  auto big = renderScreen(m.view(), h, 160, 60);
  std::string all;
  for (auto& l : big) all += l + "\n";
  EXPECT_NE(all.find("job j"), std::string::npos);
  EXPECT_NE(all.find("topology bcube"), std::string::npos);
  EXPECT_NE(all.find("ring -> bcube  reason queue"), std::string::npos);
  EXPECT_NE(all.find("down: pmu"), std::string::npos);
  EXPECT_NE(all.find("DIAGNOSIS  congested_link link other_host:node1"), std::string::npos) << all;
  EXPECT_NE(all.find("250.00ms"), std::string::npos);
  for (int w : {20, 40, 80}) {
    for (int hgt : {5, 12, 24}) {
      auto small = renderScreen(m.view(), h, w, hgt);
      EXPECT_LE(small.size(), size_t(hgt));
      for (auto& l : small) EXPECT_LE(l.size(), size_t(w));
    }
  }
  auto cut = renderScreen(m.view(), h, 120, 16);
  all.clear();
  for (auto& l : cut) all += l + "\n";
  EXPECT_NE(all.find("more ranks"), std::string::npos) << all;
}

TEST(TopView, Units) {
  EXPECT_EQ(formatSeconds(0.0005), "500us");
  EXPECT_EQ(formatSeconds(0.0125), "12.50ms");
  EXPECT_EQ(formatBytes(3.5e9), "3.50GB");
  EXPECT_EQ(formatCount(12345), "12.3k");
  EXPECT_EQ(formatCount(7), "7");
}

}  // namespace
}  // namespace bpftrain::top
