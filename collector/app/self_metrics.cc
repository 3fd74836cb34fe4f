#include "collector/app/self_metrics.h"

#include <string>

#include "collector/export/catalogue_family.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::app {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;

}  // namespace

std::vector<MetricFamily> SelfMetrics::Collect() const {
  ingest::IngestTotals t;
  for (const auto& s : ingest_.stats()) t.add(*s);
  std::vector<MetricFamily> out;
  // One family from its catalogue entry and its (value, labels) points.
  auto push = [&out](const metrics::MetricDef& def,
                     std::initializer_list<std::pair<double, ClientMetric::Label>> points) {
    MetricFamily f = exporter::familyOf(def);
    for (const auto& [value, label] : points)
      exporter::addPoint(
          f, value, label.name.empty() ? std::vector<ClientMetric::Label>{} : std::vector{label});
    out.push_back(std::move(f));
  };
  // Families with one point per value of an enum, labelled with its name.
  auto perValue = [&out](const metrics::MetricDef& def, const char* label, size_t first,
                         size_t count, auto value, auto name) {
    MetricFamily f = exporter::familyOf(def);
    for (size_t i = first; i < count; ++i)
      exporter::addPoint(f, double(value(i)), {{label, std::string(name(i))}});
    out.push_back(std::move(f));
  };
  using ingest::DecodeReason, ingest::DropReason, ingest::Protocol;
  perValue(
      metrics::kCollectorSamples, "protocol", 0, size_t(Protocol::kCount),
      [&](size_t i) { return t.samples[i]; },
      [](size_t i) { return ingest::protocolName(Protocol(i)); });
  perValue(  // reason 0 is "none"
      metrics::kCollectorDecodeErrors, "reason", 1, size_t(DecodeReason::kCount),
      [&](size_t i) { return t.decode_errors[i]; },
      [](size_t i) { return ingest::decodeReasonName(DecodeReason(i)); });
  perValue(
      metrics::kCollectorDropped, "reason", 0, size_t(DropReason::kCount),
      [&](size_t i) { return t.dropped[i]; },
      [](size_t i) { return ingest::dropReasonName(DropReason(i)); });
  perValue(  // reason 0 is "none"
      metrics::kCollectorStatsdIgnored, "reason", 1, size_t(ingest::IgnoredReason::kCount),
      [&](size_t i) { return t.ignored[i]; },
      [](size_t i) { return ingest::ignoredReasonName(ingest::IgnoredReason(i)); });
  const ClientMetric::Label none;
  push(metrics::kCollectorFramesLost, {{double(t.frames_lost), none}});
  push(metrics::kCollectorKernelDrops, {{double(t.kernel_drops), none}});
  push(metrics::kCollectorDatagrams, {{double(t.datagrams), none}});
  push(metrics::kCollectorReceivedBytes, {{double(t.bytes), none}});
  // Series count, rejected series, late samples and store memory come with the window
  // collectable (collector/export); the bound itself is configuration, so it is ours.
  push(metrics::kCollectorSeriesLimit, {{double(max_series_.load()), none}});
  push(metrics::kCollectorSenders, {{double(registry_.size()), none}});
  push(metrics::kCollectorRcvbufBytes,
       {{double(ingest_.rcvbufBytes()), {"requested", std::to_string(requested_rcvbuf_)}}});
  push(metrics::kCollectorIngestThreads, {{double(ingest_.threads()), none}});
  push(metrics::kCollectorFeatureEnabled,
       {{double(health_.bpf_enabled.load()), {"feature", "bpf"}},
        {double(health_.upstream_enabled.load()), {"feature", "upstream"}},
        {double(health_.controller_enabled.load()), {"feature", "controller"}}});
  push(metrics::kCollectorReloads, {{double(health_.reloads.load()), {"result", "ok"}},
                                    {double(health_.reload_failures.load()), {"result", "error"}}});
  push(metrics::kCollectorStepOverruns, {{double(health_.step_overruns.load()), none}});
  return out;
}

}  // namespace bpftrain::collector::app
