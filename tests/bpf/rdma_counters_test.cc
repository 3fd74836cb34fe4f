// The RDMA port counter reader (collector/loader/probes/rdma_counters) against a fixture sysfs
// tree with mlx5's counter names and rxe's: every name maps to its metric, settings are left out.
#include "collector/loader/probes/rdma_counters.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

#include "tests/bpf/rdma_sysfs_fixture.h"

namespace bpftrain::collector::loader::probes::rdma_counters {
namespace {

namespace fs = std::filesystem;
using tests::kMlx5Counters;
using tests::kMlx5HwCounters;
using tests::kRxeHwCounters;
using tests::RdmaSysfsFixture;

std::map<std::string, uint64_t> byKey(const std::vector<PortCounter>& counters) {
  std::map<std::string, uint64_t> out;
  for (const auto& c : counters) out[c.device + "/" + c.port + "/" + c.file] = c.value;
  return out;
}

TEST(RdmaCounters, EveryMlx5AndRxeCounterHasItsOwnMetric) {
  for (const char* f : kMlx5Counters) EXPECT_NE(metricFor(f), nullptr) << f;
  for (const char* f : kMlx5HwCounters) EXPECT_NE(metricFor(f), nullptr) << f;
  for (const char* f : kRxeHwCounters) EXPECT_NE(metricFor(f), nullptr) << f;
  ASSERT_NE(metricFor("out_of_buffer"), nullptr);
  EXPECT_EQ(metrics::promName(*metricFor("out_of_buffer")),
            "bpftrain_rdma_port_out_of_buffer_total");
  EXPECT_EQ(metrics::promName(*metricFor("port_xmit_data")), "bpftrain_rdma_port_xmit_data_total");
  EXPECT_EQ(metrics::promName(*metricFor("VL15_dropped")), "bpftrain_rdma_port_vl15_dropped_total");
  EXPECT_EQ(metricFor("np_cnp_sent")->labels, "device port");
  EXPECT_EQ(metricFor("lifespan"), nullptr);
  EXPECT_EQ(metricFor("some_future_counter"), nullptr);
}

TEST(RdmaCounters, ReadsEveryPortAndLeavesSettingsOut) {
  RdmaSysfsFixture fx;
  fx.mlx5("mlx5_0", 100);
  fx.mlx5("mlx5_1", 1000);
  fx.write("mlx5_1", "2", "hw_counters", "np_cnp_sent", "7\n");
  fx.write("rxe0", "1", "hw_counters", "sent_pkts", "42\n");
  fx.write("rxe0", "1", "hw_counters", "lifespan", "10\n");
  fx.write("rxe0", "1", "hw_counters", "broken", "not a number\n");
  // In both directories (rxe has link_downed in hw_counters): counted once, from counters/.
  fx.write("rxe0", "1", "counters", "link_downed", "3\n");
  fx.write("rxe0", "1", "hw_counters", "link_downed", "99\n");
  const auto all = byKey(readPortCounters(fx.root()));
  const size_t per_mlx5 = std::size(kMlx5Counters) + std::size(kMlx5HwCounters);
  EXPECT_EQ(all.size(), 2 * per_mlx5 + 1 + 2);
  EXPECT_EQ(all.at("mlx5_0/1/port_xmit_data"), 100u);
  EXPECT_EQ(all.at("mlx5_1/1/port_xmit_data"), 1000u);
  EXPECT_EQ(all.at("mlx5_0/1/rp_cnp_handled"), 100u + per_mlx5 - 2);
  EXPECT_EQ(all.at("mlx5_1/2/np_cnp_sent"), 7u);
  EXPECT_EQ(all.at("rxe0/1/sent_pkts"), 42u);
  EXPECT_EQ(all.at("rxe0/1/link_downed"), 3u);
  EXPECT_EQ(all.count("mlx5_0/1/lifespan"), 0u);
  EXPECT_EQ(all.count("rxe0/1/lifespan"), 0u);
  EXPECT_EQ(all.count("rxe0/1/broken"), 0u);
  EXPECT_EQ(noPorts(fx.root()), "");
}

TEST(RdmaCounters, NoPortsSaysHowToGetOne) {
  RdmaSysfsFixture fx;
  EXPECT_TRUE(readPortCounters(fx.root()).empty());
  EXPECT_NE(noPorts(fx.root()).find("rdma link add"), std::string::npos) << noPorts(fx.root());
  EXPECT_NE(noPorts("/nonexistent/infiniband"), "");
}

}  // namespace
}  // namespace bpftrain::collector::loader::probes::rdma_counters
