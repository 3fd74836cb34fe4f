// Prometheus families of our own metrics, built on scrape from their catalogue entries: the
// collector's self-metrics, the window store's health and the upstream forwarder's counters take
// name, HELP and type from one place.
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/metric_family.h>

#include <string>
#include <utility>
#include <vector>

#include "common/metric_catalogue.h"

namespace bpftrain::collector::exporter {

inline prometheus::MetricType prometheusType(metrics::Kind kind) {
  switch (kind) {
    case metrics::Kind::kCounter:
      return prometheus::MetricType::Counter;
    case metrics::Kind::kGauge:
      return prometheus::MetricType::Gauge;
    case metrics::Kind::kDistribution:
      return prometheus::MetricType::Summary;
  }
  return prometheus::MetricType::Untyped;
}

// An empty family: points are added with addPoint().
inline prometheus::MetricFamily familyOf(const metrics::MetricDef& def) {
  return prometheus::MetricFamily{
      metrics::promName(def), std::string(def.help), prometheusType(def.kind), {}};
}

// One point of a counter or gauge family.
inline void addPoint(prometheus::MetricFamily& family, double value,
                     std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (family.type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  family.metric.push_back(std::move(m));
}

}  // namespace bpftrain::collector::exporter
