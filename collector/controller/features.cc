#include "collector/controller/features.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "common/metric_catalogue.h"

namespace bpftrain::collector::controller {
namespace {

using window::SeriesKind;
using window::SeriesSnapshot;

const std::string* label(const SeriesSnapshot& s, std::string_view name) {
  for (const auto& [k, v] : s.labels)
    if (k == name) return &v;
  return nullptr;
}

bool forJob(const SeriesSnapshot& s, std::string_view job) {
  const std::string* j = label(s, "job");
  return j == nullptr || *j == job;
}

double quantile(const SeriesSnapshot& s, double q) {
  for (const auto& [qq, v] : s.quantiles)
    if (std::abs(qq - q) < 1e-9) return v;
  return s.max;  // no sketch: the window maximum bounds every quantile
}

double mean(const SeriesSnapshot& s) { return s.count > 0 ? s.sum / double(s.count) : 0; }

// Counters: increments per second over the window. `rate` is count/s for other kinds.
double perSecond(const SeriesSnapshot& s) { return s.rate; }

int rankOf(const SeriesSnapshot& s) {
  const std::string* r = label(s, "rank");
  if (r == nullptr) return -1;
  char* end = nullptr;
  long v = std::strtol(r->c_str(), &end, 10);
  return (end != r->c_str() && *end == '\0' && v >= 0) ? int(v) : -1;
}

// What a port counter tells the controller (RdmaSignals); kNone for the rest (data, requests
// by type, errors that are not the path's: constraint, access, length).
enum class PortCounterUse { kNone, kPackets, kLoss, kCongestion, kRnr };
PortCounterUse portCounterUse(std::string_view name) {
  namespace m = metrics;
  struct Entry {
    const metrics::MetricDef* def;
    PortCounterUse use;
  };
  static const Entry kUses[] = {
      {&m::kRdmaPortXmitPackets, PortCounterUse::kPackets},
      {&m::kRdmaPortRcvPackets, PortCounterUse::kPackets},
      {&m::kRdmaPortSentPkts, PortCounterUse::kPackets},
      {&m::kRdmaPortRcvdPkts, PortCounterUse::kPackets},
      {&m::kRdmaPortOutOfSequence, PortCounterUse::kLoss},
      {&m::kRdmaPortOutOfSeqRequest, PortCounterUse::kLoss},
      {&m::kRdmaPortDuplicateRequest, PortCounterUse::kLoss},
      {&m::kRdmaPortPacketSeqErr, PortCounterUse::kLoss},
      {&m::kRdmaPortRcvdSeqErr, PortCounterUse::kLoss},
      {&m::kRdmaPortImpliedNakSeqErr, PortCounterUse::kLoss},
      {&m::kRdmaPortLocalAckTimeoutErr, PortCounterUse::kLoss},
      {&m::kRdmaPortCompleterRetryErr, PortCounterUse::kLoss},
      {&m::kRdmaPortRoceAdpRetrans, PortCounterUse::kLoss},
      {&m::kRdmaPortNpEcnMarkedRocePackets, PortCounterUse::kCongestion},
      {&m::kRdmaPortNpCnpSent, PortCounterUse::kCongestion},
      {&m::kRdmaPortRpCnpHandled, PortCounterUse::kCongestion},
      {&m::kRdmaPortOutOfBuffer, PortCounterUse::kRnr},
      {&m::kRdmaPortRcvdRnrErr, PortCounterUse::kRnr},
      {&m::kRdmaPortSendRnrErr, PortCounterUse::kRnr},
      {&m::kRdmaPortRnrNakRetryErr, PortCounterUse::kRnr},
  };
  if (name.rfind("bpftrain_rdma_port_", 0) != 0) return PortCounterUse::kNone;
  for (const Entry& e : kUses)
    if (e.def->name == name) return e.use;
  return PortCounterUse::kNone;
}

}  // namespace

std::string_view linkName(Link l) { return l == Link::kSameHost ? "same_host" : "other_host"; }

namespace {

// The link class of a transport series; nullopt without a (known) link label.
std::optional<Link> linkOf(const SeriesSnapshot& s) {
  const std::string* l = label(s, "link");
  if (l == nullptr) return std::nullopt;
  if (*l == "same_host") return Link::kSameHost;
  if (*l == "other_host") return Link::kOtherHost;
  return std::nullopt;
}

// The newest probe round (the ranks' readings within kRoundNs of the newest: a round reaches the
// collector within a telemetry interval), or the previous one carried; the ring's level from the
// readings taken on a flat topology (RingProbe).
void updateRingProbe(Features& f, std::span<const std::pair<int64_t, double>> readings,
                     const Features* previous, bool topology_settled) {
  constexpr int64_t kRoundNs = 500'000'000;
  RingProbe& p = f.ring_probe;
  if (previous != nullptr) p = previous->ring_probe;
  int64_t newest = -1;
  for (const auto& [at, s] : readings) newest = std::max(newest, at);
  const bool new_reading = newest > p.at_ns;
  if (new_reading) {
    p.seconds = 0;
    for (const auto& [at, s] : readings)
      if (at >= newest - kRoundNs && s > 0) p.seconds = p.seconds > 0 ? std::min(p.seconds, s) : s;
    p.at_ns = newest;
  }
  const uint32_t n = std::min<uint32_t>(p.n, RingProbe::kHistory);
  p.reference_s = 0;
  if (n >= kRingProbeMinHistory) {
    std::array<float, RingProbe::kHistory> sorted = p.history;
    std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.begin() + n);
    p.reference_s = sorted[n / 2];
  }
  p.ratio = p.reference_s > 0 && p.seconds > 0 ? p.seconds / p.reference_s : 0;
  if (new_reading && p.seconds > 0 && f.topology && *f.topology != Topology::kHierarchical &&
      f.config_consistent && topology_settled &&
      (p.ratio <= 0 || p.ratio < kRingProbeCongestedRatio)) {
    p.history[p.n % RingProbe::kHistory] = float(p.seconds);
    ++p.n;
  }
}

}  // namespace

std::vector<std::string> jobsIn(std::span<const SeriesSnapshot> snapshots) {
  std::set<std::string> jobs;
  for (const SeriesSnapshot& s : snapshots) {
    if (metrics::storedName(s.name) != metrics::kStepSeconds.name || s.count == 0) continue;
    if (const std::string* j = label(s, "job")) jobs.insert(*j);
  }
  return {jobs.begin(), jobs.end()};
}

Features extractFeatures(std::span<const SeriesSnapshot> snapshots, std::string_view job,
                         int64_t now_ns, const Features* previous) {
  Features f;
  f.job = std::string(job);
  f.now_ns = now_ns;
  if (previous != nullptr) f.busbw_by_topology = previous->busbw_by_topology;

  double step_sum = 0, allreduce_sum = 0;
  std::set<int> ranks;
  std::set<int> topologies, pinnings;
  std::map<std::string, int> topology_info;  // name -> ranks reporting it as current
  int64_t topology_info_newest = std::numeric_limits<int64_t>::min();
  std::string topology_info_name;
  double busbw_sum = 0, busbw_window_sum = 0;
  int busbw_n = 0;
  double local_faults = 0, remote_faults = 0;
  std::map<int, double> step_p50_by_rank;
  std::array<std::map<std::string, double>, kLinkCount> delivery_by_peer;  // peer node -> rate
  std::vector<std::pair<int64_t, double>> ring_probes;  // per rank: (taken at, seconds)

  for (const SeriesSnapshot& s : snapshots) {
    if (!forJob(s, job)) continue;
    // Stored names carry no _total; a store that keeps Prometheus names works too.
    const std::string_view name = metrics::storedName(s.name);
    namespace m = metrics;
    // Gauges without a sample in the window are stale (the rank stopped reporting).
    bool fresh = s.count > 0;

    if (name == m::kStepSeconds.name && fresh) {
      ranks.insert(rankOf(s));
      double& p50 = step_p50_by_rank[rankOf(s)];
      p50 = std::max(p50, quantile(s, 0.5));
      f.step_p50_s = std::max(f.step_p50_s, quantile(s, 0.5));
      f.step_p99_s = std::max(f.step_p99_s, quantile(s, 0.99));
      step_sum += s.sum;
    } else if (name == m::kAllreduceSeconds.name && fresh) {
      allreduce_sum += s.sum;
    } else if (name == m::kRingProbeSeconds.name && fresh) {
      ring_probes.emplace_back(s.last_update_ns, s.last);
    } else if (name == m::kTopology.name && fresh) {
      topologies.insert(int(std::lround(s.last)));
    } else if (name == m::kPinning.name && fresh) {
      pinnings.insert(int(std::lround(s.last)));
    } else if (name == m::kTopologyInfo.name && fresh && s.last > 0.5) {
      if (const std::string* t = label(s, "topology")) {
        ++topology_info[*t];
        if (s.last_update_ns > topology_info_newest) {
          topology_info_newest = s.last_update_ns;
          topology_info_name = *t;
        }
      }
    } else if (name == m::kConfigEpoch.name && fresh) {
      int64_t e = std::llround(s.last);
      f.epoch_min = f.epoch_min < 0 ? e : std::min(f.epoch_min, e);
      f.epoch_max = std::max(f.epoch_max, e);
    } else if (name == m::kCheckpointActive.name && fresh) {
      if (s.last > 0.5) f.checkpoint_active = true;
    } else if (name == m::kAllreduceBusbw.name && fresh) {
      busbw_sum += s.last;
      busbw_window_sum += mean(s);
      ++busbw_n;
    } else if (name == m::kSamplesPerSecond.name && fresh) {
      f.samples_per_s += s.last;
      f.samples_per_s_window += mean(s);
    } else if (name == m::kTransportQueuedBytes.name && fresh) {
      f.has_transport = true;
      f.queued_bytes_p99 = std::max(f.queued_bytes_p99, quantile(s, 0.99));
      if (std::optional<Link> l = linkOf(s)) {
        LinkSignals& ls = f.links[int(*l)];
        ls.seen = f.has_links = true;
        ls.queued_bytes_p99 = std::max(ls.queued_bytes_p99, quantile(s, 0.99));
      }
    } else if (name == m::kTransportDeliveryRate.name && s.count >= kMinDeliverySamples) {
      if (std::optional<Link> l = linkOf(s)) {
        const std::string* peer = label(s, "peer_node");
        double& best = delivery_by_peer[int(*l)][peer != nullptr ? *peer : ""];
        best = std::max(best, quantile(s, 0.9));
      }
    } else if (name == m::kTransportOutstandingWorkRequests.name && fresh) {
      f.has_transport = true;
      f.outstanding_work_requests_p99 =
          std::max(f.outstanding_work_requests_p99, quantile(s, 0.99));
    } else if (name == m::kTransportRttSeconds.name && fresh) {
      f.has_transport = true;
      double p50 = quantile(s, 0.5), p99 = quantile(s, 0.99);
      f.rtt_p50_s = std::max(f.rtt_p50_s, p50);
      f.rtt_p99_s = std::max(f.rtt_p99_s, p99);
      f.rtt_jitter_s = std::max(f.rtt_jitter_s, p99 - p50);
      if (std::optional<Link> l = linkOf(s)) {
        LinkSignals& ls = f.links[int(*l)];
        ls.seen = f.has_links = true;
        ls.samples += s.count;
        if (p50 > ls.rtt_p50_s || ls.worst_rank < 0) {
          const std::string* peer = label(s, "peer_node");
          ls.worst_peer_node = peer != nullptr ? *peer : "";
          ls.worst_rank = rankOf(s);
        }
        ls.rtt_p50_s = std::max(ls.rtt_p50_s, p50);
        ls.rtt_p99_s = std::max(ls.rtt_p99_s, p99);
        ls.rtt_jitter_s = std::max(ls.rtt_jitter_s, p99 - p50);
      }
    } else if (name == m::kTransportRetransmits.name) {
      f.retransmits_per_s += perSecond(s);
    } else if (name == m::kMigrations.name) {
      const std::string* scope = label(s, "scope");
      if (scope == nullptr) continue;
      if (*scope == "cpu") f.migrations_per_s[int(MigrationScope::kCpu)] += perSecond(s);
      if (*scope == "llc") f.migrations_per_s[int(MigrationScope::kLlc)] += perSecond(s);
      if (*scope == "node") f.migrations_per_s[int(MigrationScope::kNode)] += perSecond(s);
    } else if (name == m::kNumaHintFaults.name) {
      const std::string* loc = label(s, "locality");
      if (loc != nullptr && *loc == "remote") remote_faults += perSecond(s);
      if (loc != nullptr && *loc == "local") local_faults += perSecond(s);
    } else if (name == m::kPageMigrations.name) {
      f.page_migrations_per_s += perSecond(s);
    } else if (name == m::kTlbFlushes.name) {
      f.tlb_flushes_per_s += perSecond(s);
    } else if (name == m::kRunqueueWaitSeconds.name) {
      if (const double waited = perSecond(s); waited > f.runqueue_wait_s_per_s) {
        f.runner_up_wait_s_per_s = f.runqueue_wait_s_per_s;
        f.runqueue_wait_s_per_s = waited;
        f.most_waiting_rank = rankOf(s);
      } else {
        f.runner_up_wait_s_per_s = std::max(f.runner_up_wait_s_per_s, waited);
      }
    } else if (name == m::kRdmaOutstandingWorkRequests.name && fresh) {
      f.rdma.seen = true;
      f.rdma.outstanding_work_requests_p99 =
          std::max(f.rdma.outstanding_work_requests_p99, quantile(s, 0.99));
    } else if (name == m::kRdmaCompletionSeconds.name && fresh) {
      f.rdma.seen = true;
      f.rdma.completion_p50_s = std::max(f.rdma.completion_p50_s, quantile(s, 0.5));
      f.rdma.completion_p99_s = std::max(f.rdma.completion_p99_s, quantile(s, 0.99));
    } else if (PortCounterUse use = portCounterUse(name); use != PortCounterUse::kNone) {
      f.rdma.seen = true;
      const double r = perSecond(s);
      if (use == PortCounterUse::kPackets) f.rdma.packets_per_s += r;
      if (use == PortCounterUse::kLoss) f.rdma.loss_events_per_s += r;
      if (use == PortCounterUse::kCongestion) f.rdma.congestion_marks_per_s += r;
      if (use == PortCounterUse::kRnr) f.rdma.rnr_events_per_s += r;
    }
  }

  f.has_steps = !ranks.empty();
  f.ranks = int(ranks.size());
  if (!step_p50_by_rank.empty()) {
    std::vector<double> p50s;
    for (const auto& [rank, p50] : step_p50_by_rank) {
      p50s.push_back(p50);
      if (p50 > f.slowest_step_p50_s) {
        f.slowest_step_p50_s = p50;
        f.slowest_rank = rank;
      }
    }
    std::nth_element(p50s.begin(), p50s.begin() + long(p50s.size() / 2), p50s.end());
    const double median = p50s[p50s.size() / 2];
    if (median > 0) f.straggler_ratio = f.slowest_step_p50_s / median;
  }
  if (step_sum > 0) f.allreduce_share = std::clamp(allreduce_sum / step_sum, 0.0, 1.0);
  f.numa_local_faults_per_s = local_faults;
  f.numa_remote_faults_per_s = remote_faults;
  if (local_faults + remote_faults > 0)
    f.remote_fault_share = remote_faults / (local_faults + remote_faults);

  // The numeric gauge is authoritative; topology_info (one series per value) is the fallback.
  if (!topologies.empty()) {
    int t = *topologies.rbegin();
    if (t >= 0 && t < kTopologyCount) f.topology = Topology(t);
    if (topologies.size() > 1) f.config_consistent = false;
  } else if (!topology_info_name.empty()) {
    f.topology = parseTopology(topology_info_name);
    if (topology_info.size() > 1) f.config_consistent = false;
  }
  if (!pinnings.empty()) {
    int p = *pinnings.rbegin();
    if (p >= 0 && p < kPinModeCount) f.pinning = PinMode(p);
    if (pinnings.size() > 1) f.config_consistent = false;
  }
  if (f.epoch_min != f.epoch_max) f.config_consistent = false;

  if (f.topology && f.config_consistent)
    f.topology_since_ns =
        previous != nullptr && previous->topology == f.topology && previous->topology_since_ns >= 0
            ? previous->topology_since_ns
            : now_ns;
  const bool topology_settled =
      f.topology_since_ns >= 0 && now_ns - f.topology_since_ns >= kDeliverySettleNs;
  for (int l = 0; l < kLinkCount; ++l) {
    LinkSignals& ls = f.links[l];
    for (const auto& [peer, rate] : delivery_by_peer[l]) {
      if (rate <= 0 || (ls.delivery_bytes_per_s > 0 && rate >= ls.delivery_bytes_per_s)) continue;
      ls.delivery_bytes_per_s = rate;
      ls.delivery_peer_node = peer;
    }
    if (previous != nullptr) ls.delivery_levels = previous->links[l].delivery_levels;
    if (!f.topology) continue;
    LinkSignals::DeliveryLevel& level = ls.delivery_levels[int(*f.topology)];
    const uint32_t n = std::min<uint32_t>(level.n, LinkSignals::kDeliveryHistory);
    if (n >= kDeliveryMinHistory) {
      std::array<float, LinkSignals::kDeliveryHistory> sorted = level.history;
      std::nth_element(sorted.begin(), sorted.begin() + n / 2, sorted.begin() + n);
      ls.delivery_reference_bytes_per_s = sorted[n / 2];
    }
    const double rate = ls.delivery_bytes_per_s;
    if (rate <= 0) continue;
    const double ref = ls.delivery_reference_bytes_per_s;
    if (ref > 0) ls.delivery_ratio = rate / ref;
    if (topology_settled && (ref <= 0 || ls.delivery_ratio > kDeliveryDropFraction)) {
      level.history[level.n % LinkSignals::kDeliveryHistory] = float(rate);
      ++level.n;
    }
  }

  updateRingProbe(f, ring_probes, previous, topology_settled);

  if (busbw_n > 0) {
    f.busbw = busbw_sum / busbw_n;
    f.busbw_window = busbw_window_sum / busbw_n;
    // Only attribute bandwidth to a topology when every rank runs it.
    if (f.topology && f.config_consistent) f.busbw_by_topology[int(*f.topology)] = f.busbw;
  }
  return f;
}

const Features& FeatureExtractor::update(std::span<const window::SeriesSnapshot> snapshots,
                                         int64_t now_ns) {
  last_ = extractFeatures(snapshots, job_, now_ns, has_last_ ? &last_ : nullptr);
  has_last_ = true;
  return last_;
}

nlohmann::json featuresJson(const Features& f) {
  nlohmann::json j;
  j["ranks"] = f.ranks;
  j["step_p50_s"] = f.step_p50_s;
  j["step_p99_s"] = f.step_p99_s;
  j["allreduce_share"] = f.allreduce_share;
  j["topology"] = f.topology ? std::string(topologyName(*f.topology)) : "";
  j["pinning"] = f.pinning ? std::string(pinModeName(*f.pinning)) : "";
  j["config_consistent"] = f.config_consistent;
  j["epoch"] = f.epoch_min;
  j["checkpoint_active"] = f.checkpoint_active;
  j["busbw"] = f.busbw;
  j["busbw_window"] = f.busbw_window;
  nlohmann::json by = nlohmann::json::object();
  for (int t = 0; t < kTopologyCount; ++t)
    if (f.busbw_by_topology[t] > 0)
      by[std::string(topologyName(Topology(t)))] = f.busbw_by_topology[t];
  j["busbw_by_topology"] = by;
  j["has_transport"] = f.has_transport;
  j["queued_bytes_p99"] = f.queued_bytes_p99;
  j["outstanding_work_requests_p99"] = f.outstanding_work_requests_p99;
  j["rtt_p50_s"] = f.rtt_p50_s;
  j["rtt_jitter_s"] = f.rtt_jitter_s;
  j["retransmits_per_s"] = f.retransmits_per_s;
  if (f.has_links) {
    nlohmann::json links = nlohmann::json::object();
    for (int l = 0; l < kLinkCount; ++l) {
      const LinkSignals& ls = f.links[l];
      if (!ls.seen) continue;
      links[std::string(linkName(Link(l)))] = {
          {"rtt_p50_s", ls.rtt_p50_s},
          {"rtt_jitter_s", ls.rtt_jitter_s},
          {"queued_bytes_p99", ls.queued_bytes_p99},
          {"samples", ls.samples},
          {"delivery_bytes_per_s", ls.delivery_bytes_per_s},
          {"delivery_reference_bytes_per_s", ls.delivery_reference_bytes_per_s},
          {"delivery_ratio", ls.delivery_ratio},
          {"worst_peer_node", ls.worst_peer_node},
          {"worst_rank", ls.worst_rank}};
    }
    j["links"] = links;
  }
  if (f.rdma.seen)
    j["rdma"] = {{"outstanding_work_requests_p99", f.rdma.outstanding_work_requests_p99},
                 {"completion_p50_s", f.rdma.completion_p50_s},
                 {"completion_p99_s", f.rdma.completion_p99_s},
                 {"packets_per_s", f.rdma.packets_per_s},
                 {"loss_events_per_s", f.rdma.loss_events_per_s},
                 {"congestion_marks_per_s", f.rdma.congestion_marks_per_s},
                 {"rnr_events_per_s", f.rdma.rnr_events_per_s}};
  j["slowest_rank"] = f.slowest_rank;
  j["straggler_ratio"] = f.straggler_ratio;
  j["migrations_per_s"] = {{"cpu", f.migrations_per_s[0]},
                           {"llc", f.migrations_per_s[1]},
                           {"node", f.migrations_per_s[2]}};
  j["remote_fault_share"] = f.remote_fault_share;
  j["page_migrations_per_s"] = f.page_migrations_per_s;
  j["tlb_flushes_per_s"] = f.tlb_flushes_per_s;
  j["runqueue_wait_s_per_s"] = f.runqueue_wait_s_per_s;
  j["most_waiting_rank"] = f.most_waiting_rank;
  j["runner_up_wait_s_per_s"] = f.runner_up_wait_s_per_s;
  j["samples_per_s"] = f.samples_per_s;
  j["samples_per_s_window"] = f.samples_per_s_window;
  if (f.ring_probe.at_ns >= 0)
    j["ring_probe"] = {{"seconds", f.ring_probe.seconds},
                       {"age_s", double(f.now_ns - f.ring_probe.at_ns) * 1e-9},
                       {"reference_s", f.ring_probe.reference_s},
                       {"ratio", f.ring_probe.ratio}};
  return j;
}

}  // namespace bpftrain::collector::controller
