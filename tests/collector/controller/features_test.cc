#include "collector/controller/features.h"

#include <gtest/gtest.h>

#include "tests/collector/controller/synthetic.h"

namespace bpftrain::collector::controller {
namespace {

using namespace testing;

TEST(Features, ExtractsEverySignalForTheJob) {
  JobState j;
  j.ranks = 2;
  j.step_s = 0.2;
  j.allreduce_s = 0.05;
  j.topology = int(Topology::kHierarchical);
  j.pinning = int(PinMode::kCompact);
  j.epoch = 3;
  j.busbw = 2e9;
  j.queued_bytes_p99 = 900e3;
  j.rtt_p50 = 1e-4;
  j.rtt_p99 = 4e-3;
  std::vector<SeriesSnapshot> s = snapshotsOf(j);
  // Rank 1 is the slow one.
  s.push_back(dist("bpftrain_step_seconds", jr("j", 3), 0.3, 0.5, 10, 3.0));
  s.push_back(counter("bpftrain_migrations", {{"job", "j"}, {"rank", "0"}, {"scope", "cpu"}}, 4));
  s.push_back(counter("bpftrain_migrations", {{"job", "j"}, {"rank", "1"}, {"scope", "cpu"}}, 6));
  s.push_back(
      counter("bpftrain_migrations_total", {{"job", "j"}, {"rank", "1"}, {"scope", "node"}}, 2));
  s.push_back(counter("bpftrain_numa_hint_faults",
                      {{"job", "j"}, {"locality", "remote"}, {"rank", "0"}}, 30));
  s.push_back(counter("bpftrain_numa_hint_faults",
                      {{"job", "j"}, {"locality", "local"}, {"rank", "0"}}, 70));
  s.push_back(counter("bpftrain_page_migrations",
                      {{"job", "j"}, {"rank", "0"}, {"reason", "numa_misplaced"}}, 5));
  s.push_back(counter("bpftrain_tlb_flushes",
                      {{"job", "j"}, {"rank", "0"}, {"reason", "remote_shootdown"}}, 11));
  s.push_back(counter("bpftrain_runqueue_wait_seconds", jr("j", 0), 0.25));
  s.push_back(counter("bpftrain_runqueue_wait_seconds", jr("j", 1), 0.5));
  s.push_back(counter("bpftrain_transport_retransmits", jr("j", 0), 1.5));
  // Another job's series must not leak in.
  s.push_back(dist("bpftrain_step_seconds", jr("other", 0), 9, 9));
  s.push_back(
      counter("bpftrain_migrations", {{"job", "other"}, {"rank", "0"}, {"scope", "cpu"}}, 1000));

  Features f = extractFeatures(s, "j", 42, nullptr);
  EXPECT_TRUE(f.has_steps);
  EXPECT_EQ(f.ranks, 3);
  EXPECT_DOUBLE_EQ(f.step_p50_s, 0.3);
  EXPECT_DOUBLE_EQ(f.step_p99_s, 0.5);
  // allreduce sum 2 ranks * 10 * 0.05 = 1.0; step sum 2 * 10 * 0.2 + 3.0 = 7.0
  EXPECT_NEAR(f.allreduce_share, 1.0 / 7.0, 1e-12);
  ASSERT_TRUE(f.topology.has_value());
  EXPECT_EQ(*f.topology, Topology::kHierarchical);
  ASSERT_TRUE(f.pinning.has_value());
  EXPECT_EQ(*f.pinning, PinMode::kCompact);
  EXPECT_TRUE(f.config_consistent);
  EXPECT_EQ(f.epoch_min, 3);
  EXPECT_EQ(f.epoch_max, 3);
  EXPECT_FALSE(f.checkpoint_active);
  EXPECT_DOUBLE_EQ(f.busbw, 2e9);
  EXPECT_DOUBLE_EQ(f.busbw_by_topology[int(Topology::kHierarchical)], 2e9);
  EXPECT_DOUBLE_EQ(f.busbw_by_topology[int(Topology::kRing)], 0);
  EXPECT_TRUE(f.has_transport);
  EXPECT_DOUBLE_EQ(f.queued_bytes_p99, 900e3);
  EXPECT_DOUBLE_EQ(f.rtt_p50_s, 1e-4);
  EXPECT_DOUBLE_EQ(f.rtt_p99_s, 4e-3);
  EXPECT_NEAR(f.rtt_jitter_s, 3.9e-3, 1e-12);
  EXPECT_DOUBLE_EQ(f.retransmits_per_s, 1.5);
  EXPECT_DOUBLE_EQ(f.migrations_per_s[int(MigrationScope::kCpu)], 10);
  EXPECT_DOUBLE_EQ(f.migrations_per_s[int(MigrationScope::kLlc)], 0);
  EXPECT_DOUBLE_EQ(f.migrations_per_s[int(MigrationScope::kNode)], 2);
  EXPECT_DOUBLE_EQ(f.remote_fault_share, 0.3);
  EXPECT_DOUBLE_EQ(f.page_migrations_per_s, 5);
  EXPECT_DOUBLE_EQ(f.tlb_flushes_per_s, 11);
  EXPECT_DOUBLE_EQ(f.runqueue_wait_s_per_s, 0.5);
  EXPECT_EQ(f.most_waiting_rank, 1);
  EXPECT_DOUBLE_EQ(f.samples_per_s, 1000);
  EXPECT_DOUBLE_EQ(f.samples_per_s_window, 1000);
}

// RDMA: the verbs probes per rank (worst rank's quantiles) and the host's port counters (no job
// label) by what they say about the path: packets, loss, congestion marks, receiver not ready.
TEST(Features, RdmaSignalsFromVerbsProbesAndPortCounters) {
  JobState j;
  j.ranks = 2;
  std::vector<SeriesSnapshot> s = snapshotsOf(j);
  s.push_back(dist("bpftrain_rdma_completion_seconds", jr("j", 0), 40e-6, 90e-6));
  s.push_back(dist("bpftrain_rdma_completion_seconds", jr("j", 1), 60e-6, 300e-6));
  s.push_back(dist("bpftrain_rdma_outstanding_work_requests", jr("j", 1), 2, 8));
  s.push_back(dist("bpftrain_rdma_completion_seconds", jr("other", 0), 1.0, 2.0));
  const std::vector<std::pair<std::string, std::string>> port = {{"device", "mlx5_0"},
                                                                 {"port", "1"}};
  s.push_back(counter("bpftrain_rdma_port_xmit_packets", port, 1e6));
  s.push_back(counter("bpftrain_rdma_port_rcv_packets", port, 1e6));
  s.push_back(counter("bpftrain_rdma_port_out_of_sequence", port, 150));
  s.push_back(counter("bpftrain_rdma_port_local_ack_timeout_err", port, 50));
  s.push_back(counter("bpftrain_rdma_port_np_ecn_marked_roce_packets", port, 900));
  s.push_back(counter("bpftrain_rdma_port_rp_cnp_handled", port, 100));
  s.push_back(counter("bpftrain_rdma_port_out_of_buffer", port, 7));
  s.push_back(counter("bpftrain_rdma_port_xmit_data", port, 5e8));  // data: no signal of its own
  Features f = FeatureExtractor("j").update(s, 0);
  ASSERT_TRUE(f.rdma.seen);
  EXPECT_DOUBLE_EQ(f.rdma.completion_p50_s, 60e-6);
  EXPECT_DOUBLE_EQ(f.rdma.completion_p99_s, 300e-6);
  EXPECT_DOUBLE_EQ(f.rdma.outstanding_work_requests_p99, 8);
  EXPECT_DOUBLE_EQ(f.rdma.packets_per_s, 2e6);
  EXPECT_DOUBLE_EQ(f.rdma.loss_events_per_s, 200);
  EXPECT_DOUBLE_EQ(f.rdma.lossRatio(), 1e-4);
  EXPECT_DOUBLE_EQ(f.rdma.congestion_marks_per_s, 1000);
  EXPECT_DOUBLE_EQ(f.rdma.rnr_events_per_s, 7);
  EXPECT_TRUE(featuresJson(f).contains("rdma"));
  EXPECT_FALSE(FeatureExtractor("j").update(snapshotsOf(j), 0).rdma.seen);
}

TEST(Features, NoStepsMeansNothingToDecide) {
  std::vector<SeriesSnapshot> s = {dist("bpftrain_step_seconds", jr("j", 0), 0.1, 0.1, 0)};
  Features f = extractFeatures(s, "j", 0, nullptr);
  EXPECT_FALSE(f.has_steps);
  EXPECT_EQ(f.epoch_min, -1);
  EXPECT_FALSE(f.topology.has_value());
}

TEST(Features, DisagreeingRanksAreInconsistentAndCheckpointIsAnyRank) {
  JobState j;
  std::vector<SeriesSnapshot> s = snapshotsOf(j);
  s.push_back(gauge("bpftrain_config_epoch", jr("j", 7), 1));
  s.push_back(gauge("bpftrain_checkpoint_active", jr("j", 7), 1));
  Features f = extractFeatures(s, "j", 0, nullptr);
  EXPECT_EQ(f.epoch_min, 0);
  EXPECT_EQ(f.epoch_max, 1);
  EXPECT_FALSE(f.config_consistent);
  EXPECT_TRUE(f.checkpoint_active);
}

TEST(Features, StaleGaugesAreIgnored) {
  JobState j;
  std::vector<SeriesSnapshot> s = snapshotsOf(j);
  s.push_back(gauge("bpftrain_checkpoint_active", jr("j", 5), 1, /*count=*/0));
  Features f = extractFeatures(s, "j", 0, nullptr);
  EXPECT_FALSE(f.checkpoint_active);
}

TEST(Features, TopologyInfoIsTheFallbackAndHostSeriesCount) {
  std::vector<SeriesSnapshot> s = {dist("bpftrain_step_seconds", jr("j", 0), 0.1, 0.1)};
  SeriesSnapshot old_t =
      gauge("bpftrain_topology_info", {{"job", "j"}, {"rank", "0"}, {"topology", "ring"}}, 1);
  old_t.last_update_ns = 10;
  SeriesSnapshot new_t =
      gauge("bpftrain_topology_info", {{"job", "j"}, {"rank", "0"}, {"topology", "bcube"}}, 1);
  new_t.last_update_ns = 20;
  s.push_back(old_t);
  s.push_back(new_t);
  s.push_back(counter("bpftrain_tlb_flushes", {{"reason", "task_switch"}}, 7));  // no job label
  Features f = extractFeatures(s, "j", 0, nullptr);
  ASSERT_TRUE(f.topology.has_value());
  EXPECT_EQ(*f.topology, Topology::kBcube);
  EXPECT_DOUBLE_EQ(f.tlb_flushes_per_s, 7);
}

TEST(Features, BusbwPerTopologyAccumulatesAcrossSteps) {
  FeatureExtractor ex("j");
  JobState j;
  j.topology = int(Topology::kRing);
  j.busbw = 3e9;
  ex.update(snapshotsOf(j), 1);
  j.topology = int(Topology::kHierarchical);
  j.busbw = 1e9;
  const Features& f = ex.update(snapshotsOf(j), 2);
  EXPECT_DOUBLE_EQ(f.busbw_by_topology[int(Topology::kRing)], 3e9);
  EXPECT_DOUBLE_EQ(f.busbw_by_topology[int(Topology::kHierarchical)], 1e9);
  EXPECT_EQ(jobsIn(snapshotsOf(j)), std::vector<std::string>{"j"});
}

// The controller's window step: delivery levels learn only once a topology ran kDeliverySettleNs.
constexpr int64_t kStepNs = 500'000'000;

// The delivery rate is judged against the link class's own level: the median of its recent
// readings, known after kDeliveryMinHistory of them, which a throttled link's readings do not
// join; per peer node the busiest connection's p90 counts (the synthetic p90 is 1.25x the
// median given), and a series with too few samples says nothing.
TEST(Features, DeliveryRatioAgainstTheLinksLearnedLevel) {
  FeatureExtractor ex("j");
  JobState j;
  j.same_host = {1e-3, 5e-3, 6e6};
  j.other_host = {1e-3, 5e-3, 6e6};
  j.other_host.delivery = 1e9;
  int64_t now = 0;
  ex.update(snapshotsOf(j), now += kStepNs);
  EXPECT_EQ(ex.last().links[int(Link::kOtherHost)].delivery_ratio, 0) << "no level yet";
  for (int i = 0; i < 14; ++i) ex.update(snapshotsOf(j), now += kStepNs);
  const LinkSignals& calm = ex.last().links[int(Link::kOtherHost)];
  EXPECT_DOUBLE_EQ(calm.delivery_bytes_per_s, 1.25e9);
  EXPECT_NEAR(calm.delivery_ratio, 1.0, 1e-6);
  EXPECT_EQ(calm.delivery_peer_node, "node1");
  EXPECT_EQ(ex.last().links[int(Link::kSameHost)].delivery_ratio, 0) << "no samples: unknown";
  j.other_host.delivery = 0.18e9;  // the uplink throttled, for longer than the history
  for (int i = 0; i < 40; ++i) ex.update(snapshotsOf(j), now += kStepNs);
  const LinkSignals& slow = ex.last().links[int(Link::kOtherHost)];
  EXPECT_NEAR(slow.delivery_ratio, 0.18, 1e-6);
  EXPECT_NEAR(slow.delivery_reference_bytes_per_s, 1.25e9, 1e3);
  j.other_host.delivery = 0.96e9;
  const Features& back = ex.update(snapshotsOf(j), now += kStepNs);
  EXPECT_NEAR(back.links[int(Link::kOtherHost)].delivery_ratio, 0.96, 1e-6);
  // A series with fewer than kMinDeliverySamples says nothing.
  std::vector<window::SeriesSnapshot> few = snapshotsOf(j);
  for (window::SeriesSnapshot& s : few)
    if (s.name == "bpftrain_transport_delivery_rate_bytes_per_second")
      s.count = kMinDeliverySamples - 1;
  EXPECT_EQ(ex.update(few, now += kStepNs).links[int(Link::kOtherHost)].delivery_bytes_per_s, 0);
}

// Each topology carries its own level: what a connection carries follows the traffic pattern
// (netlab, nothing throttled: the ring's other_host 4.7 GB/s, hierarchical's 2.1), so a switch
// starts a new level, unknown until it has kDeliveryMinHistory readings taken once it ran
// kDeliverySettleNs, and the ring's level is still there when the ring comes back.
TEST(Features, EachTopologyHasItsOwnDeliveryLevel) {
  FeatureExtractor ex("j");
  JobState j;
  j.same_host = {1e-3, 5e-3, 6e6};
  j.other_host = {1e-3, 5e-3, 6e6};
  j.other_host.delivery = 4.7e9 / 1.25;  // the p90 the helper reports is 1.25x the median
  int64_t now = 0;
  for (int i = 0; i < 14; ++i) ex.update(snapshotsOf(j), now += kStepNs);
  EXPECT_NEAR(ex.last().links[int(Link::kOtherHost)].delivery_ratio, 1.0, 1e-6);
  j.topology = int(Topology::kHierarchical);
  // Its first window still holds the ring's samples (netlab: 16 GB/s against hierarchical's
  // 1.9): read, but not learned, for kDeliverySettleNs.
  j.other_host.delivery = 16e9 / 1.25;
  const Features& first = ex.update(snapshotsOf(j), now += kStepNs);
  EXPECT_EQ(first.links[int(Link::kOtherHost)].delivery_ratio, 0)
      << "hierarchical has no level yet (against the ring's it would read 0.45x)";
  for (int i = 0; i < 3; ++i) ex.update(snapshotsOf(j), now += kStepNs);
  j.other_host.delivery = 2.1e9 / 1.25;
  for (int i = 0; i < 14; ++i) ex.update(snapshotsOf(j), now += kStepNs);
  EXPECT_NEAR(ex.last().links[int(Link::kOtherHost)].delivery_ratio, 1.0, 1e-6);
  EXPECT_NEAR(ex.last().links[int(Link::kOtherHost)].delivery_reference_bytes_per_s, 2.1e9, 1e3);
  j.topology = int(Topology::kRing);
  j.other_host.delivery = 4.7e9 / 1.25;
  const Features& back = ex.update(snapshotsOf(j), now += kStepNs);
  EXPECT_NEAR(back.links[int(Link::kOtherHost)].delivery_ratio, 1.0, 1e-6);
  EXPECT_NEAR(back.links[int(Link::kOtherHost)].delivery_reference_bytes_per_s, 4.7e9, 1e3);
}

}  // namespace
// The ring probe: one reading per round (the lowest rank's), carried between rounds; the ring's
// level from the readings taken on the ring, not from congested ones or another topology's.
TEST(Features, RingProbeReadingAndTheRingsClearLevel) {
  constexpr int64_t kS = 1'000'000'000;
  FeatureExtractor ex("j");
  JobState j;
  j.topology = int(Topology::kRing);
  int64_t now = 0;
  auto look = [&](double probe_s, int64_t at_ns) -> const Features& {
    now += kS;
    j.ring_probe_s = probe_s;
    j.ring_probe_at_ns = at_ns;
    return ex.update(snapshotsOf(j), now);
  };
  // Before the topology settled (kDeliverySettleNs): a reading, but no level yet.
  const Features& first = look(0.004, 1 * kS);
  EXPECT_DOUBLE_EQ(first.ring_probe.seconds, 0.004);  // rank 0's, the lowest
  EXPECT_EQ(first.ring_probe.reference_s, 0);
  EXPECT_EQ(first.ring_probe.ratio, 0);
  // Three readings on the settled ring make its level; a repeated one (no new round) counts once.
  look(0.004, 1 * kS);
  look(0.003, 3 * kS);
  look(0.003, 3 * kS);
  look(0.005, 5 * kS);
  EXPECT_EQ(look(0.004, 6 * kS).ring_probe.reference_s, 0);  // known from the next look
  const Features& known = look(0.004, 7 * kS);
  EXPECT_NEAR(known.ring_probe.reference_s, 0.004, 1e-9);
  EXPECT_NEAR(known.ring_probe.ratio, 1.0, 1e-6);
  // A congested reading on the ring is no level.
  const Features& slow = look(0.02, 8 * kS);
  EXPECT_NEAR(slow.ring_probe.ratio, 5.0, 1e-6);
  EXPECT_NEAR(look(0.004, 9 * kS).ring_probe.reference_s, 0.004, 1e-9);
  // Readings under another topology are judged against the ring's level, and are none of it.
  j.topology = int(Topology::kHierarchical);
  for (int k = 0; k < 6; ++k) look(0.008, (10 + k) * kS);
  const Features& hier = look(0.008, 16 * kS);
  EXPECT_NEAR(hier.ring_probe.reference_s, 0.004, 1e-9);
  EXPECT_NEAR(hier.ring_probe.ratio, 2.0, 1e-6);
  // With no reading in the window the last one is carried, and goes stale.
  j.ring_probe_s = -1;
  now += kS;
  const Features& carried = ex.update(snapshotsOf(j), now);
  EXPECT_NEAR(carried.ring_probe.seconds, 0.008, 1e-9);
  EXPECT_TRUE(carried.ring_probe.fresh(now));
  EXPECT_FALSE(carried.ring_probe.fresh(now + RingProbe::kFreshNs + kS));
  EXPECT_TRUE(featuresJson(carried).contains("ring_probe"));
}

}  // namespace bpftrain::collector::controller
