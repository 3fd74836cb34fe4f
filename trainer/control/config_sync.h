// How a configuration (controller decision, --switch-every draw) and the --duration stop reach
// every rank at the same step. Rank 0 collects decisions and writes one SyncWord; it travels in the
// 8-float tail of each gradient bucket's allreduce (other ranks write zeros, so the sum is rank 0's
// word exactly, at no extra round trip) or, once allreduces are slow, also in a broadcast at spaced
// step boundaries, and once buckets are slow in a broadcast before each next bucket. A new topology
// alone applies at the next bucket, inside the step; anything else at the next step. Pure:
// ConfigSync does no I/O, the caller moves the buffers (tests are the network).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "common/enum_names.h"
#include "trainer/control/verifier.h"

namespace bpftrain::trainer::control {

class ControlReceiver;

// The word as it travels. One encoding, eight floats holding exact small integers:
//   [0] marker 1   [1..3] epoch in 16-bit pieces (low first)   [4] topology   [5] pinning
//   [6] flags (1: broadcast delivery from the next step, 2: stop after this step,
//             4: a bucket sync before the next bucket of this step)
//   [7] broadcast delivery: steps until the next broadcast sync (1..kMaxSyncEvery)
// The broadcast sends the same eight floats as 32 bytes (IEEE-754 bits, little-endian).
struct SyncWord {
  ConfigWord config;
  bool broadcast = false;
  bool stop = false;
  uint32_t sync_every = 1;
  bool sync_next_bucket = false;
  bool operator==(const SyncWord&) const = default;
};
inline constexpr size_t kSyncWordFloats = 8;
inline constexpr size_t kSyncWordBytes = kSyncWordFloats * sizeof(float);
inline constexpr uint64_t kMaxSyncEpoch = (uint64_t{1} << 48) - 1;
inline constexpr uint32_t kMaxSyncEvery = 1000;

// Throws std::out_of_range for an epoch above kMaxSyncEpoch or sync_every outside
// 1..kMaxSyncEvery (ConfigSync never hands it one: such decisions are dropped when collected).
void encodeSyncWord(const SyncWord& word, std::span<float, kSyncWordFloats> out);
void encodeSyncWord(const SyncWord& word, std::span<uint8_t, kSyncWordBytes> out);
// nullopt unless the marker is 1 and every field is an integer in range: a world whose sum is not
// rank 0's word (all zeros, say) delivers nothing.
std::optional<SyncWord> decodeSyncWord(std::span<const float, kSyncWordFloats> in);
std::optional<SyncWord> decodeSyncWord(std::span<const uint8_t, kSyncWordBytes> in);

// --sync: how words travel. auto starts in the tail and moves to the broadcast (and back) with the
// allreduce time; tail and broadcast are fixed (tests and benchmarks).
enum class Delivery : uint8_t { kAuto, kTail, kBroadcast };
inline constexpr auto kDeliveryNames = enumNames<Delivery>({
    {Delivery::kAuto, "auto"},
    {Delivery::kTail, "tail"},
    {Delivery::kBroadcast, "broadcast"},
});

// Above this rank-0 allreduce average (EWMA), auto delivers by broadcast when the allreduce runs
// in one bucket: a decision that just missed it waits a whole one in the tail; a boundary
// broadcast costs one round trip (and a sync point: SyncOptions::buckets).
inline constexpr double kBroadcastAboveAllreduceSeconds = 0.040;
// Broadcast syncs at most this often: on millisecond steps a broadcast at every boundary doubled
// the step time on the 2-core development machine; a decision still lands within a step + this.
inline constexpr double kSyncIntervalSeconds = 0.025;
// Once one of rank 0's buckets took this long (from one bucket's tail to the next's, inside a
// step), its next tail asks every rank for a bucket sync: a broadcast of the word before the next
// bucket, so a decision that arrives during a bucket applies at the next one instead of riding
// that one's tail and applying a bucket later. On netlab's throttled loopback the ring's buckets
// ran ~350 ms and the first switch waited 0.55-0.57 s from the decision's arrival; a 32-byte
// broadcast costs about a millisecond there. Calm buckets (25-80 ms on netlab) pay nothing.
inline constexpr double kBucketSyncAboveSeconds = 0.150;

// A configuration rank 0 may send, with the kernel arrival time of its datagram (0: none).
struct Decision {
  ConfigWord config;
  uint64_t arrival_ns = 0;
};

// Where rank 0's decisions come from. Polled in the order added at every point a word is written
// (a boundary broadcast, each bucket's tail), so several times a step.
class DecisionSource {
 public:
  virtual ~DecisionSource() = default;
  // newest_epoch: the newest epoch applied or pending; a decision not above it is dropped as stale.
  virtual std::optional<Decision> poll(uint64_t step, uint64_t newest_epoch) = 0;
};

// The controller's verified decisions from rank 0's control socket. The callbacks see each
// accepted decision and the rejections counted during a poll (for a log line and a metric).
// `topologies` (bit t: Topology t runs here) refuses a verified decision for a topology the
// transport cannot run (none today: see topologyUnsupported), which would end the job at its first
// allreduce: it counts as rejected and goes to on_unsupported (once per decision: the
// controller's re-sends of it are replays), and the job keeps its configuration.
class ReceiverSource final : public DecisionSource {
 public:
  ReceiverSource(ControlReceiver& receiver, const Verifier& verifier,
                 std::function<void(const Decision&)> on_accepted = {},
                 std::function<void(uint64_t rejected)> on_rejected = {}, uint32_t topologies = ~0u,
                 std::function<void(const Decision&)> on_unsupported = {});
  std::optional<Decision> poll(uint64_t step, uint64_t newest_epoch) override;

 private:
  ControlReceiver& receiver_;
  const Verifier& verifier_;
  std::function<void(const Decision&)> on_accepted_;
  std::function<void(uint64_t)> on_rejected_;
  uint32_t topologies_;
  std::function<void(const Decision&)> on_unsupported_;
};

// Test and benchmark hook (--switch-every K --switch-seed S): a topology and pinning drawn from
// (seed, step) at every step > 0 that K divides, at the step's first poll only, so a resumed run
// draws what an uninterrupted run draws from there on. `topologies` (bit t: Topology t may be
// drawn) leaves out those the transport cannot run (none today: see topologyUnsupported); a draw of
// one of them takes the next allowed one.
class SwitchDraws final : public DecisionSource {
 public:
  SwitchDraws(int every, uint64_t seed, uint32_t topologies = ~0u);
  std::optional<Decision> poll(uint64_t step, uint64_t newest_epoch) override;

 private:
  uint64_t every_, seed_;
  uint32_t topologies_;
  uint64_t polled_step_ = ~uint64_t{0};
};

struct SyncOptions {
  int rank = 0;
  Delivery delivery = Delivery::kAuto;
  // --adaptive: controller decisions can arrive, so auto may move to the broadcast.
  bool adaptive = false;
  // --switch-every: switch steps must be a pure function of the step (resume tests compare with an
  // uninterrupted run), so auto never moves to the broadcast and the broadcast syncs every step.
  bool fixed_schedule = false;
  // --duration: > 0 stops every rank after the step in which rank 0's clock passes it.
  double duration_s = 0;
  // The allreduce's buckets (--allreduce-buckets; 1 on NCCL). With two or more, auto stays in the
  // tail: every bucket's tail delivers within the step, and a boundary broadcast at every step (a
  // sync point of its own) cost 4-5% of a 4-rank job's step time on netlab (--overhead-ab 8,
  // hierarchical, lo throttled, 2026-12-05: +5.3-8.3% with --sync auto, +1.8-2.8% with --sync
  // tail, the ring probe's ~2% included).
  size_t buckets = 1;
};

// A configuration change every rank makes at the same step.
struct Switch {
  ConfigWord from, to;
  uint64_t arrival_ns = 0;  // rank 0: arrival of the decision it delivers (0 elsewhere / a draw)
};

// One per rank; every rank calls the same methods at the same points of each step:
//   beginStep → [broadcastDue → writeBroadcast, comm broadcast, readBroadcast] → compute →
//   for each bucket: writeTail → allreduce(bucket + tail) → readTail →
//     [more buckets and bucketSyncDue → writeBroadcast, comm broadcast, readBucketSync]
//   → observe → stopRequested
// (one bucket: the whole gradient buffer and its own tail; collective/gradient_buckets.h).
class ConfigSync {
 public:
  using Clock = std::chrono::steady_clock;
  ConfigSync(const SyncOptions& options, ConfigWord initial);

  // Whether the protocol runs at all (decisions or a deadline); else the tail is left alone.
  bool active() const { return active_; }
  void addSource(DecisionSource& source) { sources_.push_back(&source); }
  // Training starts: rank 0's --duration deadline counts from here.
  void start(Clock::time_point now);

  // Start of a step: the configuration the previous allreduce carried, if newer.
  std::optional<Switch> beginStep();
  // Broadcast delivery: whether this boundary syncs; the same answer on every rank. `collect` false
  // (an --overhead-ab off block) skips the sync.
  bool broadcastDue(uint64_t step, bool collect) const;
  // Rank 0 collects decisions and writes the word; the others write zeros (the broadcast fills).
  void writeBroadcast(uint64_t step, Clock::time_point now,
                      std::span<uint8_t, kSyncWordBytes> word);
  // Every rank after the broadcast: a newer configuration applies now, before this allreduce.
  std::optional<Switch> readBroadcast(uint64_t step, std::span<const uint8_t, kSyncWordBytes> word);
  // Before each bucket's allreduce: zeros on every rank but 0, which (collecting decisions when
  // `collect`) writes its word. `tail` is the bucket's kSyncWordFloats tail floats.
  void writeTail(uint64_t step, bool collect, Clock::time_point now, std::span<float> tail);
  // After each bucket's allreduce: takes delivery and stop, and a newer configuration. With
  // `more_buckets` (buckets of this step remain) one that changes the topology alone applies now,
  // for the remaining buckets, and is returned; anything else is staged for the next step. Pinning
  // waits for a step boundary: it moves threads and migrates the model's pages (mbind), which
  // inside the allreduce would stall this rank's peers, and the controller judges a pinning move
  // by whole steps run under it.
  std::optional<Switch> readTail(std::span<const float> tail, bool more_buckets = false);
  // After readTail with more buckets to run: rank 0's word asked for a bucket sync (its last bucket
  // took kBucketSyncAboveSeconds or more); the same answer on every rank. The sync is a
  // writeBroadcast, the broadcast, then readBucketSync, which applies a new topology alone for the
  // remaining buckets, as readTail does, and stages anything else for the next step.
  bool bucketSyncDue() const { return active_ && bucket_sync_due_; }
  std::optional<Switch> readBucketSync(std::span<const uint8_t, kSyncWordBytes> word);
  // A finished step's times; rank 0's averages choose the delivery and space the broadcasts.
  void observe(double step_seconds, double allreduce_seconds);

  bool stopRequested() const { return stop_; }
  bool broadcastMode() const { return broadcast_mode_; }
  const ConfigWord& config() const { return config_; }
  // What a checkpoint written after this step holds: the configuration the next step runs with
  // (the one the last allreduce carried, if newer), so a resumed run switches where this one does.
  ConfigWord nextStepConfig() const;
  // Rank 0: decisions dropped because their epoch was not newer than the newest applied or
  // pending one (duplicates, reordering), or too large for the word.
  uint64_t staleDecisions() const { return stale_; }
  uint64_t unencodableDecisions() const { return unencodable_; }
  // Bucket syncs run so far (readBucketSync calls): what slow buckets cost in broadcasts.
  uint64_t bucketSyncs() const { return bucket_syncs_; }

 private:
  void collect(uint64_t step);
  uint64_t newestEpoch() const;
  SyncWord outgoing(Clock::time_point now) const;
  std::optional<Switch> apply(const ConfigWord& next);
  // A word read between buckets (tail or bucket sync): its topology alone applies now when more
  // buckets remain; anything else is staged for the next step.
  std::optional<Switch> takeBetweenBuckets(const SyncWord& w, bool more_buckets);

  SyncOptions options_;
  bool active_;
  std::vector<DecisionSource*> sources_;
  ConfigWord config_;
  std::optional<Decision> pending_;   // rank 0: collected, not yet applied
  std::optional<ConfigWord> staged_;  // from the last allreduce, applied at the next step
  uint64_t next_sync_step_ = 0;
  bool broadcast_mode_;
  bool stop_ = false;
  Clock::time_point deadline_ = Clock::time_point::max();  // rank 0
  double step_seconds_ewma_ = 0, allreduce_seconds_ewma_ = 0;
  // Rank 0: when it wrote the last tail, in which step, and the last bucket's time it measured.
  Clock::time_point last_tail_at_{};
  uint64_t last_tail_step_ = ~uint64_t{0};
  double bucket_seconds_ = 0;
  bool bucket_sync_due_ = false;
  uint64_t stale_ = 0, unencodable_ = 0, bucket_syncs_ = 0;
};

}  // namespace bpftrain::trainer::control
