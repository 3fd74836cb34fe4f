#include "collector/top/model.h"

#include <algorithm>
#include <cstdlib>
#include <set>

namespace bpftrain::top {
namespace {

constexpr std::string_view kPrefix = "bpftrain_";

std::string keyOf(const Sample& s) {
  std::string k = s.name + "{";
  for (const auto& [n, v] : s.labels) k += n + "=" + v + ",";
  return k + "}";
}

bool rankLess(const std::string& a, const std::string& b) {
  char *ea = nullptr, *eb = nullptr;
  long x = std::strtol(a.c_str(), &ea, 10), y = std::strtol(b.c_str(), &eb, 10);
  if (*ea == '\0' && *eb == '\0' && !a.empty() && !b.empty()) return x < y;
  return a < b;
}

// Host signals: (metric without prefix and _total, label that splits it, shown name).
struct SignalDef {
  std::string_view metric;
  std::string_view label;
  std::string_view shown;
};
constexpr SignalDef kHost[] = {
    {"migrations_total", "scope", "migrations"},
    {"numa_task_moves_total", "kind", "numa moves"},
    {"page_migrations_total", "reason", "page migrations"},
    {"tlb_flushes_total", "reason", "tlb flushes"},
    {"page_faults_total", "", "page faults"},
    {"thp_faults_total", "", "thp faults"},
    {"dtlb_misses_total", "", "dtlb misses"},
    {"node_load_misses_total", "", "node load misses"},
    {"numa_hint_faults_total", "locality", "numa hint faults"},
};
constexpr SignalDef kTransportCounters[] = {
    {"transport_retransmits_total", "transport", "retransmits"},
    {"rdma_qp_events_total", "event", "rdma work requests"},
};
// Transport distributions: the p99 over the window, worst rank, split by `label`.
constexpr SignalDef kTransportP99[] = {
    {"transport_queued_bytes", "transport", "queued bytes p99"},
    {"transport_rtt_seconds", "transport", "rtt p99"},
    {"transport_outstanding_work_requests", "transport", "rdma outstanding p99"},
};

}  // namespace

double Model::rateOf(const std::string& key, double value, double now_s) {
  current_[key] = {value, now_s};
  auto it = previous_.find(key);
  if (it == previous_.end()) return view_.scrapes > 0 ? 0 : -1;  // new series: nothing yet
  double dt = now_s - it->second.second;
  if (dt <= 0) return -1;
  double d = value - it->second.first;
  return d < 0 ? value / dt : d / dt;  // a reset (collector restart) counts from zero
}

void Model::update(const std::vector<Sample>& samples, double now_s) {
  current_.clear();
  JobView v;
  v.scrapes = view_.scrapes;

  // Which jobs exist, and which one is shown.
  std::set<std::string> jobs;
  for (const Sample& s : samples) {
    std::string_view j = s.label("job");
    if (!j.empty() && s.name.starts_with(kPrefix)) jobs.emplace(j);
  }
  v.jobs.assign(jobs.begin(), jobs.end());
  if (!wanted_job_.empty())
    v.job = wanted_job_;
  else if (!view_.job.empty() && jobs.count(view_.job))
    v.job = view_.job;
  else if (!v.jobs.empty())
    v.job = v.jobs.front();

  std::map<std::string, RankRow, decltype(&rankLess)> ranks(&rankLess);
  std::map<std::string, double> step_sum, allreduce_sum;
  auto row = [&](const Sample& s) -> RankRow& {
    std::string r(s.label("rank"));
    RankRow& rr = ranks[r];
    rr.rank = r;
    return rr;
  };
  // Per-signal, per-label-value accumulators.
  std::map<std::string, std::map<std::string, std::pair<double, double>>> host, transport;

  for (const Sample& s : samples) {
    if (!s.name.starts_with(kPrefix)) continue;
    std::string_view n = std::string_view(s.name).substr(kPrefix.size());
    const bool ours = !v.job.empty() && s.label("job") == v.job;

    if (ours) {
      if (n == "samples_per_second") row(s).samples_per_second = s.value;
      if (n == "allreduce_busbw_bytes_per_second") row(s).busbw = s.value;
      if (n == "config_epoch") row(s).epoch = s.value;
      if (n == "step") row(s).step = s.value;
      if (n == "topology_info" && s.value == 1) row(s).topology = s.label("topology");
      if (n == "pinning_info" && s.value == 1) row(s).pinning = s.label("mode");
      if (n == "step_seconds") {
        std::string_view q = s.label("quantile");
        RankRow& r = row(s);
        if (q == "0.5") r.step_p50 = s.value;
        if (q == "0.9") r.step_p90 = s.value;
        if (q == "0.99") r.step_p99 = s.value;
      }
      if (n == "diagnosis_info" && s.value == 1)
        v.diagnosis.push_back({std::string(s.label("cause")), std::string(s.label("rank")),
                               std::string(s.label("link"))});
      if (n == "step_seconds_sum") step_sum[std::string(s.label("rank"))] = s.value;
      if (n == "allreduce_seconds_sum") allreduce_sum[std::string(s.label("rank"))] = s.value;
      for (const SignalDef& d : kHost) {
        if (n != d.metric) continue;
        std::string part = d.label.empty() ? "" : std::string(s.label(d.label));
        double r = rateOf(keyOf(s), s.value, now_s);
        auto& acc = host[std::string(d.shown)][part];
        acc.second += s.value;
        if (r >= 0)
          acc.first = std::max(acc.first, 0.0) + r;
        else if (acc.first == 0)
          acc.first = -1;
      }
      for (const SignalDef& d : kTransportCounters) {
        if (n != d.metric) continue;
        std::string part(s.label(d.label));
        double r = rateOf(keyOf(s), s.value, now_s);
        auto& acc = transport[std::string(d.shown)][part];
        acc.second += s.value;
        if (r >= 0)
          acc.first = std::max(acc.first, 0.0) + r;
        else if (acc.first == 0)
          acc.first = -1;
      }
      if (s.label("quantile") == "0.99") {
        for (const SignalDef& d : kTransportP99) {
          if (n != d.metric) continue;
          auto& acc = transport[std::string(d.shown)][std::string(s.label(d.label))];
          acc.first = -2;  // marks a value row
          acc.second = std::max(acc.second, s.value);
        }
      }
    }

    // Collector health and the controller: not per job.
    CollectorHealth& h = v.health;
    if (n == "collector_samples_total") {
      double r = rateOf(keyOf(s), s.value, now_s);
      if (r >= 0) h.samples_rate = std::max(h.samples_rate, 0.0) + r;
    }
    if (n == "collector_decode_errors_total") {
      h.decode_errors += s.value;
      double r = rateOf(keyOf(s), s.value, now_s);
      if (r >= 0) h.decode_errors_rate = std::max(h.decode_errors_rate, 0.0) + r;
    }
    if (n == "collector_frames_lost_total") h.frames_lost += s.value;
    if (n == "collector_kernel_drops_total") h.kernel_drops += s.value;
    if (n == "collector_dropped_total") h.dropped += s.value;
    if (n == "collector_statsd_ignored_total") h.statsd_ignored += s.value;
    if (n == "collector_series") h.series = s.value;
    if (n == "collector_series_limit") h.series_limit = s.value;
    if (n == "probe_up")
      (s.value == 1 ? h.probes_up : h.probes_down).emplace_back(s.label("probe"));
    if (n == "controller_decisions_total") {
      std::string k = std::string(s.label("from")) + "|" + std::string(s.label("to")) + "|" +
                      std::string(s.label("reason"));
      auto [it, fresh] = decisions_.try_emplace(k);
      DecisionRow& d = it->second;
      if (fresh) {
        d.from = s.label("from");
        d.to = s.label("to");
        d.reason = s.label("reason");
        d.last_change_s = view_.scrapes > 0 ? now_s : -1;  // new after we started: it just happened
      } else if (s.value > d.count) {
        d.last_change_s = now_s;
      }
      d.count = s.value;
    }
  }

  for (auto& [r, rr] : ranks) {
    auto st = step_sum.find(r), ar = allreduce_sum.find(r);
    if (st != step_sum.end() && ar != allreduce_sum.end() && st->second > 0)
      rr.allreduce_share = ar->second / st->second;
    if (rr.samples_per_second >= 0)
      v.samples_per_second = std::max(v.samples_per_second, 0.0) + rr.samples_per_second;
    v.ranks.push_back(rr);
  }
  auto toRows = [](auto& acc, std::vector<SignalRow>& out, const auto& order) {
    for (const SignalDef& d : order) {
      auto it = acc.find(std::string(d.shown));
      if (it == acc.end()) continue;
      SignalRow row;
      row.name = d.shown;
      for (auto& [label, rv] : it->second) {
        row.counter = rv.first != -2;
        row.parts.push_back({label, row.counter ? rv.first : -1, rv.second});
      }
      out.push_back(std::move(row));
    }
  };
  toRows(host, v.host, kHost);
  toRows(transport, v.transport, kTransportCounters);
  toRows(transport, v.transport, kTransportP99);

  for (auto& [k, d] : decisions_) v.decisions.push_back(d);
  std::stable_sort(
      v.decisions.begin(), v.decisions.end(),
      [](const DecisionRow& a, const DecisionRow& b) { return a.last_change_s > b.last_change_s; });
  std::sort(v.health.probes_up.begin(), v.health.probes_up.end());
  std::sort(v.health.probes_down.begin(), v.health.probes_down.end());

  v.scrapes = view_.scrapes + 1;
  view_ = std::move(v);
  previous_ = std::move(current_);
}

}  // namespace bpftrain::top
