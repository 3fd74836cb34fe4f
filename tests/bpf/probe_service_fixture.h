// The fixture of the BPF probes' known-answer tests (probe_service_test.cc, and the transport's in
// probe_service_tcp_test.cc): a ProbeService on the real SeriesStore, started on a workload child
// as its target, and lookups of the series it recorded. Root only (CAP_BPF/CAP_PERFMON).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "collector/ingest/sender_registry.h"
#include "collector/loader/probe_service.h"
#include "collector/window/series_store.h"
#include "common/clock.h"
#include "common/metric_catalogue.h"
#include "tests/bpf/workloads.h"
#include "tests/support/requirements.h"

namespace bpftrain::collector::loader {

// Not in an anonymous namespace: googletest needs the one fixture class in every file that uses
// it (a class per translation unit reads as two fixtures of one name).

using namespace std::chrono_literals;
using tests::bpf::Child;
using LabelMap = std::map<std::string, std::string>;

inline bool matches(const window::SeriesSnapshot& s, const std::string& name,
                    const LabelMap& want) {
  if (s.name != name) return false;
  for (const auto& [k, v] : want) {
    auto it =
        std::find_if(s.labels.begin(), s.labels.end(), [&k = k](auto& l) { return l.first == k; });
    if (it == s.labels.end() || it->second != v) return false;
  }
  return true;
}

class ProbeServiceTest : public ::testing::Test {
 public:
  // For helpers outside the fixture.
  std::unique_ptr<ProbeService> startService(ProbeOptions options) {
    return start(std::move(options));
  }
  void pollService(ProbeService& service) { service.poll(registry_, monotonicNowNs()); }

 protected:
  void SetUp() override {
    BPFTRAIN_REQUIRE_ROOT("CAP_BPF + CAP_PERFMON to load BPF programs");
    window::WindowConfig config;
    config.window = 60s;  // nothing leaves the window during a test
    config.step = 1s;
    store_ = window::SeriesStore::create(config);
  }

  std::unique_ptr<ProbeService> start(ProbeOptions options) {
    // Exact run counts (the collector's default samples them 1 s in 30 s), and every probe, those
    // off by default (thp_faults) included.
    options.run_stats.mode = RunStatsMode::kOn;
    options.enabled.insert("thp_faults");
    std::string error;
    auto service = ProbeService::create(options, *store_, 0, error);
    EXPECT_NE(service, nullptr) << error;
    // Sync targets before the workload runs.
    if (service) service->poll(registry_, monotonicNowNs());
    return service;
  }

  // Runs `target` as the only --pid target of a fresh service and polls once after it finished,
  // so its events are in the store. Returns the workload's result; nullopt if it never got ready,
  // the service did not start, or the workload outlived `timeout`.
  std::optional<int64_t> runAsOnlyTarget(Child& target, std::chrono::seconds timeout) {
    if (!target.ready(5s)) return std::nullopt;
    ProbeOptions options;
    options.pids = {target.pid()};
    auto service = start(options);
    if (!service) return std::nullopt;
    target.go();
    int64_t result = 0;
    if (!target.result(result, timeout)) return std::nullopt;
    service->poll(registry_, monotonicNowNs());
    return result;
  }

  double total(const std::string& name, const LabelMap& labels) const {
    double sum = 0;
    for (const auto& s : store_->snapshot(monotonicNowNs()))
      if (matches(s, name, labels)) sum += s.kind == window::SeriesKind::kGauge ? s.last : s.total;
    return sum;
  }

  window::SeriesSnapshot series(const std::string& name, const LabelMap& labels) const {
    for (auto& s : store_->snapshot(monotonicNowNs()))
      if (matches(s, name, labels)) return s;
    return {};
  }

  static double quantile(const window::SeriesSnapshot& s, double q) {
    for (const auto& [qq, v] : s.quantiles)
      if (qq == q) return v;
    return -1;
  }

  const ProbeStatus* statusOf(const std::vector<ProbeStatus>& all, const std::string& name) {
    for (const auto& s : all)
      if (s.name == name) return &s;
    return nullptr;
  }

  std::unique_ptr<window::SeriesStore> store_;
  ingest::SenderRegistry registry_;
};

}  // namespace bpftrain::collector::loader
