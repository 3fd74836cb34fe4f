// The collector's own health as Prometheus metrics (bpftrain_collector_*), built on scrape from
// the ingest threads' counters, the store and the registry: the hot path never sees the exporter.
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <functional>
#include <vector>

#include "collector/ingest/sender_registry.h"
#include "collector/ingest/udp_ingest.h"
#include "collector/window/series_store.h"

namespace bpftrain::collector::app {

struct Health {
  std::atomic<int> bpf_enabled{0};       // 1 when the probe service is running
  std::atomic<int> upstream_enabled{0};  // 1 when forwarding to a parent collector
  std::atomic<int> controller_enabled{0};
  std::atomic<uint64_t> reloads{0};
  std::atomic<uint64_t> reload_failures{0};
  std::atomic<uint64_t> steps{0};
  std::atomic<uint64_t> step_overruns{0};  // step listeners took longer than a step
};

class SelfMetrics : public prometheus::Collectable {
 public:
  SelfMetrics(const ingest::UdpIngest& ingest, const ingest::SenderRegistry& registry,
              const Health& health, size_t max_series, size_t requested_rcvbuf)
      : ingest_(ingest),
        registry_(registry),
        health_(health),
        max_series_(max_series),
        requested_rcvbuf_(requested_rcvbuf) {}
  void setMaxSeries(size_t n) { max_series_.store(n); }

  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const ingest::UdpIngest& ingest_;
  const ingest::SenderRegistry& registry_;
  const Health& health_;
  std::atomic<size_t> max_series_;
  size_t requested_rcvbuf_;
};

}  // namespace bpftrain::collector::app
