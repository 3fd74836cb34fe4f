// Hand-made series snapshots and a minimal SeriesStore for the controller's tests, so that they
// need neither the window implementation nor a collector.
#pragma once

#include <algorithm>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "collector/window/series_store.h"
#include "tests/collector/window/unwindowed_store.h"

namespace bpftrain::collector::controller::testing {

using window::SeriesKind;
using window::SeriesSnapshot;

inline SeriesSnapshot gauge(std::string name,
                            std::vector<std::pair<std::string, std::string>> labels, double last,
                            uint64_t count = 5) {
  SeriesSnapshot s;
  s.name = std::move(name);
  s.labels = std::move(labels);
  s.kind = SeriesKind::kGauge;
  s.count = count;
  s.last = last;
  s.sum = last * double(count);
  s.min = s.max = last;
  return s;
}

inline SeriesSnapshot counter(std::string name,
                              std::vector<std::pair<std::string, std::string>> labels,
                              double per_second) {
  SeriesSnapshot s;
  s.name = std::move(name);
  s.labels = std::move(labels);
  s.kind = SeriesKind::kCounter;
  s.count = 10;
  s.rate = per_second;
  s.sum = per_second * 5;
  s.total = s.sum;
  return s;
}

inline SeriesSnapshot dist(std::string name,
                           std::vector<std::pair<std::string, std::string>> labels, double p50,
                           double p99, uint64_t count = 10, double sum = -1) {
  SeriesSnapshot s;
  s.name = std::move(name);
  s.labels = std::move(labels);
  s.kind = SeriesKind::kDistribution;
  s.count = count;
  s.sum = sum >= 0 ? sum : p50 * double(count);
  s.min = p50;
  s.max = p99;
  s.quantiles = {{0.5, p50}, {0.9, (p50 + p99) / 2}, {0.99, p99}};
  return s;
}

inline std::vector<std::pair<std::string, std::string>> jr(const std::string& job, int rank) {
  return {{"job", job}, {"rank", std::to_string(rank)}};
}

// One job's trainer telemetry for `ranks` ranks.
struct JobState {
  std::string job = "j";
  int ranks = 2;
  double step_s = 0.2;
  double allreduce_s = 0.1;
  double samples_per_s_per_rank = 500;
  double busbw = 1e9;
  int topology = 0;
  int pinning = 0;
  int64_t epoch = 0;
  bool checkpoint = false;
  // Transport probe series (absent when has_transport is false).
  bool has_transport = true;
  double queued_bytes_p50 = 16e3, queued_bytes_p99 = 64e3;
  double rtt_p50 = 100e-6, rtt_p99 = 300e-6;
  // Per link class, as the tcp probe labels them (link, peer_node): used instead of the
  // unlabelled series above when either is present (rtt_p50 >= 0); an absent class had no
  // traffic in the window.
  struct LinkState {
    double rtt_p50 = -1, rtt_p99 = 0, queued_bytes_p99 = 1e6;
    double delivery = -1;  // bytes/s, median; < 0: no delivery-rate sample (application-limited)
    bool present() const { return rtt_p50 >= 0; }
  };
  LinkState same_host, other_host;
  // RDMA (the verbs probes per rank, the ports' counters per device): present when
  // completion_p50 >= 0.
  struct RdmaState {
    double completion_p50 = -1, completion_p99 = 0, outstanding_p99 = 1;
    double packets_per_s = 0, loss_per_s = 0;
    bool present() const { return completion_p50 >= 0; }
  };
  RdmaState rdma;
  // The ring probe (bpftrain_ring_probe_seconds): every rank's latest reading, taken at
  // ring_probe_at_ns; absent when ring_probe_s < 0.
  double ring_probe_s = -1;
  int64_t ring_probe_at_ns = 0;
};

inline std::vector<SeriesSnapshot> snapshotsOf(const JobState& j) {
  std::vector<SeriesSnapshot> v;
  for (int r = 0; r < j.ranks; ++r) {
    v.push_back(dist("bpftrain_step_seconds", jr(j.job, r), j.step_s, j.step_s * 1.2));
    v.push_back(
        dist("bpftrain_allreduce_seconds", jr(j.job, r), j.allreduce_s, j.allreduce_s * 1.2));
    v.push_back(gauge("bpftrain_samples_per_second", jr(j.job, r), j.samples_per_s_per_rank));
    v.push_back(gauge("bpftrain_allreduce_busbw_bytes_per_second", jr(j.job, r), j.busbw));
    v.push_back(gauge("bpftrain_topology", jr(j.job, r), j.topology));
    v.push_back(gauge("bpftrain_pinning", jr(j.job, r), j.pinning));
    v.push_back(gauge("bpftrain_config_epoch", jr(j.job, r), double(j.epoch)));
    v.push_back(gauge("bpftrain_checkpoint_active", jr(j.job, r), j.checkpoint ? 1 : 0));
    if (j.ring_probe_s >= 0) {
      // The last rank to arrive waits least: the others read a little more.
      SeriesSnapshot p = dist("bpftrain_ring_probe_seconds", jr(j.job, r),
                              j.ring_probe_s * (1 + 0.1 * r), j.ring_probe_s * (1 + 0.1 * r), 1);
      p.last = j.ring_probe_s * (1 + 0.1 * r);
      p.last_update_ns = j.ring_probe_at_ns;
      v.push_back(std::move(p));
    }
    if (j.has_transport && (j.same_host.present() || j.other_host.present())) {
      for (int link = 0; link < 2; ++link) {
        const JobState::LinkState& ls = link == 0 ? j.same_host : j.other_host;
        if (!ls.present()) continue;
        auto l = jr(j.job, r);
        l.push_back({"transport", "tcp"});
        l.push_back({"link", link == 0 ? "same_host" : "other_host"});
        l.push_back({"peer_node", link == 0 ? "node0" : "node1"});
        v.push_back(dist("bpftrain_transport_queued_bytes", l, ls.queued_bytes_p99 / 4,
                         ls.queued_bytes_p99));
        v.push_back(dist("bpftrain_transport_rtt_seconds", l, ls.rtt_p50, ls.rtt_p99));
        if (ls.delivery > 0)
          v.push_back(dist("bpftrain_transport_delivery_rate_bytes_per_second", l, ls.delivery,
                           1.5 * ls.delivery));
      }
    } else if (j.has_transport) {
      auto l = jr(j.job, r);
      l.push_back({"transport", "tcp"});
      v.push_back(
          dist("bpftrain_transport_queued_bytes", l, j.queued_bytes_p50, j.queued_bytes_p99));
      v.push_back(dist("bpftrain_transport_rtt_seconds", jr(j.job, r), j.rtt_p50, j.rtt_p99));
    }
    if (j.rdma.present()) {
      auto l = jr(j.job, r);
      l.push_back({"source", "gloo"});
      v.push_back(dist("bpftrain_rdma_completion_seconds", l, j.rdma.completion_p50,
                       j.rdma.completion_p99));
      v.push_back(dist("bpftrain_rdma_outstanding_work_requests", l, 1, j.rdma.outstanding_p99));
    }
  }
  if (j.rdma.present()) {
    // Two devices; packets split between sent and received, loss as out-of-sequence requests.
    for (const char* device : {"rxe0", "rxe1"}) {
      const std::vector<std::pair<std::string, std::string>> l = {{"device", device},
                                                                  {"port", "1"}};
      v.push_back(counter("bpftrain_rdma_port_sent_pkts_total", l, j.rdma.packets_per_s / 4));
      v.push_back(counter("bpftrain_rdma_port_rcvd_pkts_total", l, j.rdma.packets_per_s / 4));
      v.push_back(counter("bpftrain_rdma_port_out_of_seq_request_total", l, j.rdma.loss_per_s / 2));
    }
  }
  return v;
}

// A SeriesStore whose snapshot() returns what the test put there, plus the series recorded
// into it (the controller's own counters), aggregated simply.
class FakeStore final : public window::testing::UnwindowedStore {
 public:
  void set(std::vector<SeriesSnapshot> v) {
    std::lock_guard lock(mu_);
    external_ = std::move(v);
  }
  window::SeriesId lookup(std::string_view name, std::span<const window::Label> labels,
                          SeriesKind kind) override {
    std::lock_guard lock(mu_);
    SeriesSnapshot s;
    s.name = std::string(name);
    for (const auto& l : labels) s.labels.emplace_back(std::string(l.name), std::string(l.value));
    std::sort(s.labels.begin(), s.labels.end());
    s.kind = kind;
    for (size_t i = 0; i < own_.size(); ++i)
      if (own_[i].name == s.name && own_[i].labels == s.labels) return window::SeriesId(i);
    own_.push_back(std::move(s));
    return window::SeriesId(own_.size() - 1);
  }
  void record(int, window::SeriesId id, double value, int64_t now_ns) override {
    std::lock_guard lock(mu_);
    SeriesSnapshot& s = own_[id];
    s.count++;
    s.sum += value;
    s.total += s.kind == SeriesKind::kCounter ? value : 0;
    s.last = value;
    s.last_update_ns = now_ns;
  }
  std::vector<SeriesSnapshot> snapshot(int64_t) const override {
    std::lock_guard lock(mu_);
    std::vector<SeriesSnapshot> v = external_;
    v.insert(v.end(), own_.begin(), own_.end());
    return v;
  }
  SeriesSnapshot snapshotOne(window::SeriesId id, int64_t) const override {
    std::lock_guard lock(mu_);
    return id < own_.size() ? own_[id] : SeriesSnapshot{};
  }
  size_t seriesCount() const override { return own_.size(); }
  uint64_t rejectedSeries() const override { return 0; }

  // Sum of `total` over own series named `name` whose labels include all of `want`.
  double ownTotal(const std::string& name,
                  std::vector<std::pair<std::string, std::string>> want = {}) const {
    std::lock_guard lock(mu_);
    double t = 0;
    for (const SeriesSnapshot& s : own_) {
      if (s.name != name) continue;
      bool ok = true;
      for (const auto& w : want)
        ok = ok && std::find(s.labels.begin(), s.labels.end(), w) != s.labels.end();
      if (ok) t += s.kind == SeriesKind::kCounter ? s.total : double(s.count);
    }
    return t;
  }

 private:
  mutable std::mutex mu_;
  std::vector<SeriesSnapshot> external_;
  std::vector<SeriesSnapshot> own_;
};

}  // namespace bpftrain::collector::controller::testing
