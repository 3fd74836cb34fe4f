#include "collector/app/self_metrics.h"

#include <string>

#include "common/metric_catalogue.h"

namespace bpftrain::collector::app {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(const metrics::MetricDef& def) {
  return MetricFamily{metrics::promName(def), std::string(def.help),
                      def.kind == metrics::Kind::kCounter ? MetricType::Counter : MetricType::Gauge,
                      {}};
}

void add(MetricFamily& f, double v, std::vector<ClientMetric::Label> labels = {}) {
  ClientMetric m;
  m.label = std::move(labels);
  if (f.type == MetricType::Counter)
    m.counter.value = v;
  else
    m.gauge.value = v;
  f.metric.push_back(std::move(m));
}

}  // namespace

std::vector<MetricFamily> SelfMetrics::Collect() const {
  ingest::IngestTotals t;
  for (const auto& s : ingest_.stats()) t.add(*s);
  std::vector<MetricFamily> out;

  auto samples =
      family(metrics::kCollectorSamples);
  for (size_t p = 0; p < size_t(ingest::Protocol::kCount); ++p)
    add(samples, double(t.samples[p]),
        {{"protocol", std::string(ingest::protocolName(ingest::Protocol(p)))}});
  out.push_back(std::move(samples));

  auto errors =
      family(metrics::kCollectorDecodeErrors);
  for (size_t r = 1; r < size_t(ingest::DecodeReason::kCount); ++r)
    add(errors, double(t.decode_errors[r]),
        {{"reason", std::string(ingest::decodeReasonName(ingest::DecodeReason(r)))}});
  out.push_back(std::move(errors));

  auto dropped = family(metrics::kCollectorDropped);
  for (size_t r = 0; r < size_t(ingest::DropReason::kCount); ++r)
    add(dropped, double(t.dropped[r]),
        {{"reason", std::string(ingest::dropReasonName(ingest::DropReason(r)))}});
  out.push_back(std::move(dropped));

  auto lost =
      family(metrics::kCollectorFramesLost);
  add(lost, double(t.frames_lost));
  out.push_back(std::move(lost));

  auto kdrops = family(metrics::kCollectorKernelDrops);
  add(kdrops, double(t.kernel_drops));
  out.push_back(std::move(kdrops));

  auto dgrams =
      family(metrics::kCollectorDatagrams);
  add(dgrams, double(t.datagrams));
  out.push_back(std::move(dgrams));
  auto bytes = family(metrics::kCollectorReceivedBytes);
  add(bytes, double(t.bytes));
  out.push_back(std::move(bytes));

  // Series count, rejected series, late samples and store memory come with the window
  // collectable (collector/export); the bound itself is configuration, so it is ours.
  auto limit = family(metrics::kCollectorSeriesLimit);
  add(limit, double(max_series_.load()));
  out.push_back(std::move(limit));

  auto senders =
      family(metrics::kCollectorSenders);
  add(senders, double(registry_.size()));
  out.push_back(std::move(senders));

  auto rcvbuf = family(metrics::kCollectorRcvbufBytes);
  add(rcvbuf, double(ingest_.rcvbufBytes()), {{"requested", std::to_string(requested_rcvbuf_)}});
  out.push_back(std::move(rcvbuf));
  auto threads =
      family(metrics::kCollectorIngestThreads);
  add(threads, double(ingest_.threads()));
  out.push_back(std::move(threads));

  auto mode = family(metrics::kCollectorFeatureEnabled);
  add(mode, double(health_.bpf_enabled.load()), {{"feature", "bpf"}});
  add(mode, double(health_.upstream_enabled.load()), {{"feature", "upstream"}});
  add(mode, double(health_.controller_enabled.load()), {{"feature", "controller"}});
  out.push_back(std::move(mode));

  auto reloads = family(metrics::kCollectorReloads);
  add(reloads, double(health_.reloads.load()), {{"result", "ok"}});
  add(reloads, double(health_.reload_failures.load()), {{"result", "error"}});
  out.push_back(std::move(reloads));
  auto overruns =
      family(metrics::kCollectorStepOverruns);
  add(overruns, double(health_.step_overruns.load()));
  out.push_back(std::move(overruns));
  return out;
}

}  // namespace bpftrain::collector::app
