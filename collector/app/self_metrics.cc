#include "collector/app/self_metrics.h"

#include <string>

namespace bpftrain::collector::app {
namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;
using prometheus::MetricType;

MetricFamily family(std::string name, std::string help, MetricType type) {
  return MetricFamily{std::move(name), std::move(help), type, {}};
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
      family("bpftrain_collector_samples_total",
             "Accepted samples: one binary record or one StatsD line", MetricType::Counter);
  for (size_t p = 0; p < size_t(ingest::Protocol::kCount); ++p)
    add(samples, double(t.samples[p]),
        {{"protocol", std::string(ingest::protocolName(ingest::Protocol(p)))}});
  out.push_back(std::move(samples));

  auto errors =
      family("bpftrain_collector_decode_errors_total",
             "Datagrams, frames or lines rejected as malformed, by reason", MetricType::Counter);
  for (size_t r = 1; r < size_t(ingest::DecodeReason::kCount); ++r)
    add(errors, double(t.decode_errors[r]),
        {{"reason", std::string(ingest::decodeReasonName(ingest::DecodeReason(r)))}});
  out.push_back(std::move(errors));

  auto dropped = family("bpftrain_collector_dropped_total",
                        "Well-formed samples or frames not stored, by reason", MetricType::Counter);
  for (size_t r = 0; r < size_t(ingest::DropReason::kCount); ++r)
    add(dropped, double(t.dropped[r]),
        {{"reason", std::string(ingest::dropReasonName(ingest::DropReason(r)))}});
  out.push_back(std::move(dropped));

  auto lost =
      family("bpftrain_collector_samples_lost_total",
             "Frames missing from senders' sequence numbers (lost between sender and collector)",
             MetricType::Counter);
  add(lost, double(t.samples_lost));
  out.push_back(std::move(lost));

  auto kdrops = family("bpftrain_collector_kernel_drops_total",
                       "Datagrams the kernel dropped because an ingest socket buffer was full "
                       "(SO_RXQ_OVFL)",
                       MetricType::Counter);
  add(kdrops, double(t.kernel_drops));
  out.push_back(std::move(kdrops));

  auto dgrams =
      family("bpftrain_collector_datagrams_total", "UDP datagrams received", MetricType::Counter);
  add(dgrams, double(t.datagrams));
  out.push_back(std::move(dgrams));
  auto bytes = family("bpftrain_collector_received_bytes_total", "UDP payload bytes received",
                      MetricType::Counter);
  add(bytes, double(t.bytes));
  out.push_back(std::move(bytes));

  // Series count, rejected series, late samples and store memory come with the window
  // collectable (collector/export); the bound itself is configuration, so it is ours.
  auto limit = family("bpftrain_collector_series_limit", "Series cardinality bound (--max-series)",
                      MetricType::Gauge);
  add(limit, double(max_series_.load()));
  out.push_back(std::move(limit));

  auto senders =
      family("bpftrain_collector_senders", "Senders known from hello frames", MetricType::Gauge);
  add(senders, double(registry_.size()));
  out.push_back(std::move(senders));

  auto rcvbuf = family("bpftrain_collector_rcvbuf_bytes",
                       "Receive buffer the kernel granted per ingest socket (requested: label)",
                       MetricType::Gauge);
  add(rcvbuf, double(ingest_.rcvbufBytes()), {{"requested", std::to_string(requested_rcvbuf_)}});
  out.push_back(std::move(rcvbuf));
  auto threads =
      family("bpftrain_collector_ingest_threads", "Ingest sockets/threads", MetricType::Gauge);
  add(threads, double(ingest_.threads()));
  out.push_back(std::move(threads));

  auto mode = family("bpftrain_collector_feature_enabled",
                     "1 when a collector feature is running (0: off or degraded, see the log)",
                     MetricType::Gauge);
  add(mode, double(health_.bpf_enabled.load()), {{"feature", "bpf"}});
  add(mode, double(health_.upstream_enabled.load()), {{"feature", "upstream"}});
  add(mode, double(health_.controller_enabled.load()), {{"feature", "controller"}});
  out.push_back(std::move(mode));

  auto reloads = family("bpftrain_collector_reloads_total", "SIGHUP config reloads by result",
                        MetricType::Counter);
  add(reloads, double(health_.reloads.load()), {{"result", "ok"}});
  add(reloads, double(health_.reload_failures.load()), {{"result", "error"}});
  out.push_back(std::move(reloads));
  auto overruns =
      family("bpftrain_collector_step_overruns_total",
             "Window steps whose listeners (loader poll, upstream) took longer than a step",
             MetricType::Counter);
  add(overruns, double(health_.step_overruns.load()));
  out.push_back(std::move(overruns));
  return out;
}

}  // namespace bpftrain::collector::app
