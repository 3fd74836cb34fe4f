// What the controller sees of one training job at one window step, distilled from the series
// store's snapshots. Extraction is a pure function of the snapshots (plus the few values carried
// from the previous step, e.g. bus bandwidth per topology seen so far), so policies can be tested
// on hand-made streams without a collector.
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "collector/window/series_store.h"
#include "common/training_config.h"

namespace bpftrain::collector::controller {

enum class MigrationScope : uint8_t { kCpu = 0, kLlc = 1, kNode = 2 };
inline constexpr int kMigrationScopeCount = 3;

// The transport's links by class, from the probes' `link` label: a topology's traffic pattern is
// judged per class, so that one class's own large transfers do not look like congestion on the
// other (hierarchical's leaders keep inter-host RTT high while the same-host links are idle).
enum class Link : uint8_t { kSameHost = 0, kOtherHost = 1 };
inline constexpr int kLinkCount = 2;
std::string_view linkName(Link l);  // "same_host", "other_host"
// The flat topologies (the ring, halving-doubling, bcube) carry every link class's traffic in
// large chunks, so a congested link shows on them directly. Hierarchical loads the links with
// its own pattern: its node stage runs in shared memory, so its same-host sockets carry small
// control messages (RTT 6-18 ms throttled or not), and its leaders large inter-host chunks.
// (False while the topology is unknown.)
inline bool linksObservable(std::optional<Topology> t) {
  return t && *t != Topology::kHierarchical;
}

// One link class's transport signals over the window: the worst series' quantiles (series are
// per rank and peer node), RTT in seconds, bytes queued and unacknowledged.
struct LinkSignals {
  bool seen = false;     // some series of this class had samples in the window
  uint64_t samples = 0;  // RTT samples in the window, all series of the class
  double rtt_p50_s = 0;
  double rtt_p99_s = 0;
  double rtt_jitter_s = 0;  // p99 - p50 of the worst series
  double queued_bytes_p99 = 0;
  std::string worst_peer_node;  // the peer node of the series with the highest RTT median
  int worst_rank = -1;          // and its rank
  // Delivery rate (not application-limited), the path's rate: per peer node the highest p90
  // among the class's series with kMinDeliverySamples in the window (connections to one node
  // share its path, and a connection carrying only small control messages reads low: on netlab a
  // hierarchical job's non-leader ranks read 0.8 Gbit/s to the other host with nothing
  // throttled), then the lowest over peer nodes; 0 without one. The reference is the median of
  // the class's last kDeliveryHistory readings under the running topology (not counting
  // readings at or below kDeliveryDropFraction of it, so a throttled link does not become the
  // level; nor readings while the ranks disagree on the topology or in its first
  // kDeliverySettleNs, whose window still holds the previous topology's samples: netlab's
  // first hierarchical reading after a switch from a ring on throttled lo was 16 GB/s against
  // its 1.9, and became its level), known from
  // kDeliveryMinHistory readings on; the ratio is rate / reference, 0 while either is unknown.
  // One level per topology: its traffic pattern sets what a connection carries (on netlab,
  // nothing throttled, the ring's other_host read 4.7 GB/s and hierarchical's 2.1), so a
  // rung is judged against what it carried itself, and a rung that never ran clear has no
  // verdict. A throttled link lowers it whatever topology runs: on netlab host1's uplink at
  // 2 Gbit/s took hierarchical's other_host reading from 7-10 to 1.9-2.3 Gbit/s, with its RTT
  // unmoved.
  double delivery_bytes_per_s = 0;
  double delivery_reference_bytes_per_s = 0;
  double delivery_ratio = 0;
  std::string delivery_peer_node;  // the peer node whose reading is the class's
  static constexpr size_t kDeliveryHistory = 32;
  struct DeliveryLevel {
    std::array<float, kDeliveryHistory> history{};  // bytes/s, a ring
    uint32_t n = 0;                                 // readings ever added
  };
  std::array<DeliveryLevel, kTopologyCount> delivery_levels{};  // by Topology
};
// Delivery-rate samples a series needs in a window to say anything about its link.
inline constexpr uint64_t kMinDeliverySamples = 5;
inline constexpr uint32_t kDeliveryMinHistory = 6;
// Longer than the controller's window (1 s) and a telemetry interval.
inline constexpr int64_t kDeliverySettleNs = 2'000'000'000;
inline constexpr double kDeliveryDropFraction = 0.4;

// The ring probe (bpftrain_ring_probe_seconds; trainer/control/ring_probe.h): a 1 MiB allreduce
// on the flat ring that --adaptive ranks run every few steps whatever topology they run, so the
// ring's links can be judged from a higher rung, where their own traffic is gone (hierarchical's
// node stage runs in shared memory). A reading is one probe round: the lowest rank's time (every
// rank waits for the last to arrive; the last waits least). The reference is the median of the
// last kHistory readings taken while a flat topology ran (the ring, or halving-doubling or
// bcube, whose chunks cross the same TCP links: a controller leaves them too when those links
// congest; a job that ran halving-doubling through a clear phase had no reference and no way
// back judged by the probe), not counting those at or above kRingProbeCongestedRatio of it (so a
// congested ring does not become the level), known from kRingProbeMinHistory readings on; the
// ratio is reading / reference, 0 while either is unknown.
struct RingProbe {
  double seconds = 0;
  int64_t at_ns = -1;  // when the reading's newest sample was taken; -1: none yet
  double reference_s = 0;
  double ratio = 0;
  static constexpr size_t kHistory = 8;
  std::array<float, kHistory> history{};  // seconds, a ring
  uint32_t n = 0;                         // readings ever added
  // A reading older than this says nothing about now (the ranks probe every 1-2 s off the ring).
  static constexpr int64_t kFreshNs = 3'000'000'000;
  bool fresh(int64_t now_ns) const { return at_ns >= 0 && now_ns - at_ns <= kFreshNs; }
};
inline constexpr uint32_t kRingProbeMinHistory = 3;
// At or below: the ring's links read clear. At or above: congested (and not the ring's level).
// netlab, lo throttled to 500 Mbit/s, off the ring: 2.3-4.8x on a quiet host, 1.95-2.6x in a
// noisier run whose clear level had risen to 8 ms; clear phases off the ring read 0.47-1.57x
// (five-phase.json, 2026-12-05). At 2.5 the noisier run's dips re-probed the throttled ring twice.
inline constexpr double kRingProbeClearRatio = 1.5;
inline constexpr double kRingProbeCongestedRatio = 1.8;

struct RdmaSignals {
  bool seen = false;  // any verbs-probe or port-counter series in the window
  double outstanding_work_requests_p99 = 0;
  double completion_p50_s = 0, completion_p99_s = 0;
  double packets_per_s = 0;  // sent + received
  double loss_events_per_s = 0;
  double congestion_marks_per_s = 0;
  double rnr_events_per_s = 0;
  // Loss events per packet (0 without packets): comparable across link speeds.
  double lossRatio() const { return packets_per_s > 0 ? loss_events_per_s / packets_per_s : 0; }
};

struct Features {
  std::string job;
  int64_t now_ns = 0;
  int64_t topology_since_ns = -1;  // when every rank began reporting this topology (-1: unknown)
  int ranks = 0;                   // ranks that reported a step in the window
  bool has_steps = false;  // false: no step samples for this job in the window; nothing to decide
  // The job reports, with or without a finished step in the window: the looks between steps
  // read a window (500 ms) that a slow step leaves without one (netlab's ring on throttled lo:
  // 1.3 s steps), which is when such a look matters; the ranks' samples/s gauges, reported with
  // the step in flight, show the job live. Without this a failed re-probe of the ring went
  // unlooked-at for 0.8 s and climbed back 1.8 s after the step down instead of ~1.1.
  bool live() const { return has_steps || samples_per_s > 0; }

  // Step time over the window, seconds: the slowest rank's quantile (data parallel runs at the
  // pace of its slowest rank).
  double step_p50_s = 0;
  double step_p99_s = 0;
  // Allreduce seconds / step seconds, summed over ranks and the window (0..1).
  double allreduce_share = 0;

  // Configuration the ranks report (gauges). nullopt when no rank reported it in the window;
  // config_consistent is false while ranks disagree (e.g. mid-switch).
  std::optional<Topology> topology;
  std::optional<PinMode> pinning;
  bool config_consistent = true;
  int64_t epoch_min = -1;  // lowest and highest applied epoch over ranks; -1 when unknown
  int64_t epoch_max = -1;
  bool checkpoint_active = false;

  // Bus bandwidth, bytes/s: mean over ranks now, and the last value seen under each topology
  // (0 = never seen). Carried from step to step by FeatureExtractor.
  double busbw = 0;
  double busbw_window = 0;  // mean over ranks of each rank's window mean (smoother, lags)
  std::array<double, kTopologyCount> busbw_by_topology{};

  // Transport (BPF probes): worst series' p99 of bytes queued and unacknowledged (TCP) and of
  // outstanding work requests (RDMA), RTT quantiles and jitter (p99 - p50) in seconds,
  // retransmits per second. Bytes and work requests are never compared with each other.
  bool has_transport = false;
  double queued_bytes_p99 = 0;
  double outstanding_work_requests_p99 = 0;
  double rtt_p50_s = 0;
  double rtt_p99_s = 0;
  double rtt_jitter_s = 0;
  double retransmits_per_s = 0;
  // The same per link class; `has_links` is false when no series carries a link label (probes
  // of an older collector, or other transports), and then only the totals above exist.
  bool has_links = false;
  std::array<LinkSignals, kLinkCount> links{};

  // RDMA (issue 11): the verbs probes per rank (work requests posted and not complete, post ->
  // completion time, worst rank's quantiles) and the ports' counters per second (they carry no
  // job label: a host's ports carry its jobs' traffic). Loss: out-of-sequence and duplicate
  // packets, sequence-error NAKs, ACK timeouts, retries. Congestion marks: ECN-marked packets
  // and CNPs. RNR: a receiver with no receive posted (out of buffer, RNR NAKs).
  RdmaSignals rdma;

  // The ring's links seen from any rung (RingProbe above); carried from step to step.
  RingProbe ring_probe;

  // Stragglers: each rank's step-time median, and the slowest rank against the median rank.
  int slowest_rank = -1;
  double slowest_step_p50_s = 0;
  double straggler_ratio = 1;  // slowest rank's p50 / the median over ranks of their p50

  // Scheduler and memory (BPF probes), per second over the window, summed over ranks.
  std::array<double, kMigrationScopeCount> migrations_per_s{};
  double numa_local_faults_per_s = 0;
  double numa_remote_faults_per_s = 0;
  double remote_fault_share = 0;  // remote / (local + remote); 0 when there were none
  double page_migrations_per_s = 0;
  double tlb_flushes_per_s = 0;
  // CPU contention: seconds per second the most-waiting rank's threads were runnable but waited
  // for a CPU (bpftrain_runqueue_wait_seconds_total, summed over its threads), and that rank.
  double runqueue_wait_s_per_s = 0;
  int most_waiting_rank = -1;
  // The next rank's wait: when it too is high, the host is contended, not one rank.
  double runner_up_wait_s_per_s = 0;

  // Throughput, samples/s summed over ranks: the latest report of each rank (reacts within one
  // telemetry interval) and the window mean (smoother, lags by up to a window).
  double samples_per_s = 0;
  double samples_per_s_window = 0;
};

// Jobs with step samples in the snapshot, sorted.
std::vector<std::string> jobsIn(std::span<const window::SeriesSnapshot> snapshots);

// Features of `job` at now_ns. `previous` (may be null) supplies busbw_by_topology so far.
// Series match when their job label equals `job`; host-wide series without a job label count
// for every job.
Features extractFeatures(std::span<const window::SeriesSnapshot> snapshots, std::string_view job,
                         int64_t now_ns, const Features* previous);

// Keeps the previous step's features so that busbw per topology accumulates.
class FeatureExtractor {
 public:
  explicit FeatureExtractor(std::string job) : job_(std::move(job)) {}
  const Features& update(std::span<const window::SeriesSnapshot> snapshots, int64_t now_ns);
  const Features& last() const { return last_; }

 private:
  std::string job_;
  Features last_;
  bool has_last_ = false;
};

// Features as one JSON object (the decisions log).
nlohmann::json featuresJson(const Features& f);

}  // namespace bpftrain::collector::controller
