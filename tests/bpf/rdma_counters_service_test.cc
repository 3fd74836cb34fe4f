// RDMA port counters through ProbeService over a fixture sysfs tree (root: the service loads the
// BPF probes too): a counter that moves by K between two polls is recorded as K, the first read
// is a baseline, a reset is a new baseline, and no RDMA port puts the probe down with the fix.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "collector/ingest/sender_registry.h"
#include "collector/loader/probe_service.h"
#include "collector/window/series_store.h"
#include "common/clock.h"
#include "tests/bpf/rdma_sysfs_fixture.h"
#include "tests/support/requirements.h"

namespace bpftrain::collector::loader {
namespace {

using namespace std::chrono_literals;
using tests::kMlx5Counters;
using tests::RdmaSysfsFixture;

class RdmaCountersService : public ::testing::Test {
 protected:
  void SetUp() override {
    BPFTRAIN_REQUIRE_ROOT("CAP_BPF + CAP_PERFMON: ProbeService loads every probe module");
    window::WindowConfig config;
    config.window = 60s;
    config.step = 1s;
    store_ = window::SeriesStore::create(config);
  }
  std::unique_ptr<ProbeService> start(const std::string& root) {
    ProbeOptions options;
    options.rdma_sysfs_root = root;
    std::string error;
    auto service = ProbeService::create(options, *store_, 0, error);
    EXPECT_NE(service, nullptr) << error;
    return service;
  }
  double total(const std::string& name, const std::map<std::string, std::string>& want) {
    double sum = 0;
    for (const auto& s : store_->snapshot(monotonicNowNs())) {
      if (s.name != name) continue;
      std::map<std::string, std::string> labels(s.labels.begin(), s.labels.end());
      if (labels == want) sum += s.total;
    }
    return sum;
  }
  bool exists(const std::string& name) {
    for (const auto& s : store_->snapshot(monotonicNowNs()))
      if (s.name == name) return true;
    return false;
  }
  const ProbeStatus* status(const std::vector<ProbeStatus>& all) {
    for (const auto& s : all)
      if (s.name == "rdma_port_counters") return &s;
    return nullptr;
  }
  std::unique_ptr<window::SeriesStore> store_;
  ingest::SenderRegistry registry_;
};

TEST_F(RdmaCountersService, RecordsWhatEachCounterCountedSinceTheLastStep) {
  RdmaSysfsFixture fx;
  fx.mlx5("mlx5_0", 5000);
  auto service = start(fx.root());
  ASSERT_NE(service, nullptr);
  const auto all = service->status();
  ASSERT_NE(status(all), nullptr);
  EXPECT_TRUE(status(all)->up) << status(all)->reason;
  service->poll(registry_, monotonicNowNs());  // the baseline
  const std::map<std::string, std::string> port{{"device", "mlx5_0"}, {"port", "1"}};
  EXPECT_EQ(total("bpftrain_rdma_port_out_of_buffer", port), 0) << "the boot-time count leaked";
  fx.write("mlx5_0", "1", "hw_counters", "out_of_buffer", "123456\n");
  fx.write("mlx5_0", "1", "hw_counters", "np_cnp_sent", "1\n");  // below its baseline: a reset
  fx.write("mlx5_0", "1", "hw_counters", "new_counter", "5\n");  // appears later: a baseline
  service->poll(registry_, monotonicNowNs());
  fx.write("mlx5_0", "1", "hw_counters", "np_cnp_sent", "4\n");
  fx.write("mlx5_0", "1", "hw_counters", "new_counter", "12\n");
  service->poll(registry_, monotonicNowNs());
  const uint64_t oob_base = 5000 + std::size(kMlx5Counters);  // first hw counter's value
  EXPECT_EQ(total("bpftrain_rdma_port_out_of_buffer", port), double(123456 - oob_base));
  EXPECT_EQ(total("bpftrain_rdma_port_np_cnp_sent", port), 3);
  EXPECT_EQ(total("bpftrain_rdma_port_other",
                  {{"device", "mlx5_0"}, {"port", "1"}, {"counter", "new_counter"}}),
            7);
  EXPECT_TRUE(exists("bpftrain_rdma_port_xmit_data"));  // from the first poll, at 0
  EXPECT_FALSE(exists("bpftrain_rdma_port_lifespan"));
}

TEST_F(RdmaCountersService, NoRdmaPortIsDownWithTheFix) {
  RdmaSysfsFixture fx;
  auto service = start(fx.root());
  ASSERT_NE(service, nullptr);
  const auto all = service->status();
  ASSERT_NE(status(all), nullptr);
  EXPECT_FALSE(status(all)->up);
  EXPECT_NE(status(all)->reason.find("no RDMA port"), std::string::npos) << status(all)->reason;
}

}  // namespace
}  // namespace bpftrain::collector::loader
