// RankRunner's control side: where decisions come from (rank 0's verified control socket,
// --switch-every's draws), how every rank applies them at the same step or bucket (ConfigSync's
// words in the gradient tail or a broadcast), the warm-up of every topology before step 0, and the
// ring probe at spaced step boundaries.
#include <cinttypes>
#include <stdexcept>
#include <string>

#include "common/clock.h"
#include "common/hmac.h"
#include "common/wire_format.h"
#include "trainer/app/rank_runner_impl.h"
#include "trainer/control/ring_probe.h"
#include "trainer/model/huge_buffer.h"

namespace bpftrain::trainer::app {

using wire::MetricId;

// Decision delivery (control/config_sync.h) and where its decisions come from: on rank 0 the
// verified control socket (--adaptive) and the --switch-every draws.
void RankRunner::startControl() {
  hooks_.emplace(o_, start_step_, runnableTopologies(o_.transport));
  control::SyncOptions so;
  so.rank = o_.rank;
  so.delivery = hooks_->delivery();
  so.adaptive = o_.adaptive;
  so.fixed_schedule = hooks_->fixedSchedule();
  so.duration_s = o_.duration_s;
  so.buckets = buckets_->size();
  sync_.emplace(so, resumed_config_);
  if (o_.rank != 0) return;
  if (o_.adaptive) {
    std::string error;
    auto secret = readSecretFile(o_.secret_file, error);
    if (!secret) throw std::runtime_error("--secret " + o_.secret_file + ": " + error);
    verifier_ = std::make_unique<control::Verifier>(o_.job, *secret, config().epoch);
    receiver_ = std::make_unique<control::ControlReceiver>(o_.control, *verifier_);
    log("control listening on %s (port %u)", o_.control.c_str(), unsigned(receiver_->port()));
    decisions_.emplace(
        *receiver_, *verifier_,
        [this](const control::Decision& d) {
          log("decision epoch %" PRIu64 " arrived at %" PRIu64 " ns", d.config.epoch, d.arrival_ns);
        },
        [this](uint64_t rejected) {
          if (emitter_) emitter_->addCounter(MetricId::kControlRejected, double(rejected));
        },
        // NCCL runs its own algorithms: a Gloo topology cannot be switched to there.
        o_.backend == "nccl" ? 1u << unsigned(config().topology) : runnableTopologies(o_.transport),
        [this](const control::Decision& d) {
          log("decision epoch %" PRIu64 " refused: %s; the job keeps topology %s", d.config.epoch,
              o_.backend == "nccl"
                  ? "--backend nccl runs NCCL's algorithms (steered by --nccl-control)"
                  : collective::topologyUnsupported(d.config.topology, o_.transport).c_str(),
              topologyLabel(config().topology).c_str());
        });
    sync_->addSource(*decisions_);
  }
  if (control::DecisionSource* draws = hooks_->draws()) sync_->addSource(*draws);
}

void RankRunner::publishConfig() {
  if (!emitter_) return;
  emitter_->setGauge(MetricId::kConfigEpoch, double(config().epoch));
  emitter_->setGauge(MetricId::kTopology, double(uint8_t(config().topology)));
  emitter_->setGauge(MetricId::kPinning, double(uint8_t(config().pinning)));
}

// Every rank runs this at the same step (and bucket) with the same switch.
void RankRunner::applySwitch(const control::Switch& s, uint64_t step, size_t bucket) {
  if (s.to.pinning != s.from.pinning) applyPinning(s.to.pinning);
  const uint64_t applied = realtimeNowNs();
  publishConfig();
  const std::string arrived =
      s.arrival_ns ? " (arrived " + std::to_string(s.arrival_ns) + " ns)" : "";
  const std::string where = bucket > 0 ? " mid-step, after bucket " + std::to_string(bucket) +
                                             " of " + std::to_string(buckets_->size())
                                       : "";
  log("applied epoch %" PRIu64 " at step %" PRIu64 ": topology %s pinning %s at %" PRIu64 " ns%s%s",
      s.to.epoch, step, std::string(topologyName(s.to.topology)).c_str(),
      std::string(pinModeName(s.to.pinning)).c_str(), applied, arrived.c_str(), where.c_str());
}

// At a step boundary, before compute: the configuration the last allreduce carried, then (with
// broadcast delivery, at spaced boundaries) rank 0's word by broadcast.
void RankRunner::syncAtBoundary(uint64_t step, bool features_on) {
  if (auto s = sync_->beginStep()) applySwitch(*s, step);
  if (!sync_->broadcastDue(step, features_on)) return;
  uint8_t word[control::kSyncWordBytes];
  broadcastWord(step, word);
  if (auto s = sync_->readBroadcast(step, word)) applySwitch(*s, step);
}

// A boundary or bucket sync: rank 0's word (collected afresh) to every rank by broadcast.
void RankRunner::broadcastWord(uint64_t step, std::span<uint8_t, control::kSyncWordBytes> word) {
  const auto t0 = Clock::now();
  sync_->writeBroadcast(step, t0, word);
  comm_->broadcast(word, 0);
  ++broadcasts_;
  broadcast_s_ += seconds(Clock::now() - t0);
}

// Rank 0's control socket overflowed since the last look (a flood): counted and said, once a
// second at most; training did not wait for it.
void RankRunner::reportControlDrops() {
  const uint64_t drops = receiver_->kernelDrops();
  if (drops == control_drops_reported_) return;
  if (emitter_)
    emitter_->addCounter(MetricId::kControlDropped, double(drops - control_drops_reported_));
  log("control socket full: the kernel dropped %" PRIu64
      " datagrams so far (a flood of control frames?); bpftrain_control_dropped_total counts them",
      drops);
  control_drops_reported_ = drops;
}

// When the topology can change during the run (--adaptive, --switch-every) on Gloo: every
// topology sets each gradient bucket up before step 0 (Communicator::warm: what its algorithm
// allocates and registers per buffer, without moving data), so that set-up is not paid inside the
// first step after a switch. Measured (4 ranks, mlp:2048x4, 4 buckets, --switch-every 6, 2
// cores): the two steps after a first switch to halving-doubling or bcube took 0.76-0.82 s against
// 0.43-0.46 s after a later one, and the controller judges a trial by those readings (the bandit
// abandoned a start-up trial of halving-doubling in a clear phase at 170 samples/s against the
// ring's 663). Halving-doubling's set-up is all in Gloo's constructor (a receive buffer the size
// of the bucket, zeroed, and its buffers registered with each peer): built here, its first two
// steps took 0.46-0.50 s. Bcube's constructor reserves its receive buffers without touching
// them, so its first steps still fault them in (1.0-1.07 s for two, against 0.40-0.59 later):
// the default policies never pick bcube, and running it here would cost every adaptive job the
// bucket's allreduces at start-up (6.8 s in all, with the ring's and hierarchical's, for the
// first version on netlab's throttled loopback) and bcube's memory.
// The price is memory held from the start: halving-doubling's receive buffers, the gradients'
// size (+49 MiB a rank on mlp:2048x4). --warm-topologies off leaves it to the first switch.
void RankRunner::warmTopologies() {
  if (!comm_ || o_.backend == "nccl" || o_.world == 1 || (!o_.adaptive && o_.switch_every <= 0))
    return;
  if (!o_.warm_topologies) {
    log("--warm-topologies off: a switch's first steps to halving-doubling or bcube set their "
        "buffers up and cost more than later ones");
    return;
  }
  const auto t0 = Clock::now();
  const int64_t rss_before = model::residentBytes();
  const std::span<float> buffer = model_->gradientsWithTail();
  const uint32_t topologies = runnableTopologies(o_.transport);
  for (size_t t = 0; t < kTopologyCount; ++t) {
    if (!(topologies & (1u << t))) continue;
    for (size_t b = 0; b < buckets_->size(); ++b)
      comm_->warm(buckets_->data(buffer, b), Topology(t));
  }
  const int64_t rss_after = model::residentBytes();
  const double grown_mib =
      rss_before >= 0 && rss_after >= 0 ? double(rss_after - rss_before) / (1 << 20) : -1;
  log("every topology set up for each of the %zu gradient buckets in %.2f s, so that a switch's "
      "first steps do not pay it; resident set %+.0f MiB (--warm-topologies off leaves both to "
      "the first switch)",
      buckets_->size(), seconds(Clock::now() - t0), grown_mib);
}

// Under --adaptive on Gloo, at spaced step boundaries (control/ring_probe.h): the same steps on
// every rank, since the step and the topology running at the boundary are the same everywhere.
double RankRunner::ringProbe(uint64_t step, bool features_on) {
  if (ring_probe_.empty() || !features_on || step == start_step_ ||
      !control::ringProbeDue(step, config().topology, true))
    return -1;
  const auto t0 = Clock::now();
  comm_->allreduce(ring_probe_, Topology::kRing);
  const double s = seconds(Clock::now() - t0);
  ++ring_probes_;
  ring_probe_s_ += s;
  return s;
}

}  // namespace bpftrain::trainer::app
