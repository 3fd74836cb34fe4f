#include "trainer/control/config_sync.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <stdexcept>
#include <string>

#include "common/clock.h"
#include "common/wire_format.h"
#include "trainer/control/control_receiver.h"

namespace bpftrain::trainer::control {
namespace {

constexpr uint32_t kFlagBroadcast = 1;
constexpr uint32_t kFlagStop = 2;
constexpr uint32_t kFlagSyncNextBucket = 4;

// An integer-valued float in [lo, hi], else nullopt (a sum that is not rank 0's word).
std::optional<uint32_t> field(float f, uint32_t lo, uint32_t hi) {
  if (!(f >= float(lo) && f <= float(hi)) || std::floor(f) != f) return std::nullopt;
  return uint32_t(f);
}

// splitmix64's finalizer: the switch draws are a pure function of (seed, step).
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

void encodeSyncWord(const SyncWord& w, std::span<float, kSyncWordFloats> out) {
  if (w.config.epoch > kMaxSyncEpoch)
    throw std::out_of_range("sync word: epoch " + std::to_string(w.config.epoch) +
                            " does not fit in 48 bits");
  if (w.sync_every < 1 || w.sync_every > kMaxSyncEvery)
    throw std::out_of_range("sync word: sync_every " + std::to_string(w.sync_every) +
                            " is not in 1.." + std::to_string(kMaxSyncEvery));
  // Each value is an integer below 2^24, exact in a float; adding the other ranks' zeros keeps it.
  out[0] = 1;
  out[1] = float(w.config.epoch & 0xFFFF);
  out[2] = float((w.config.epoch >> 16) & 0xFFFF);
  out[3] = float((w.config.epoch >> 32) & 0xFFFF);
  out[4] = float(uint8_t(w.config.topology));
  out[5] = float(uint8_t(w.config.pinning));
  out[6] = float((w.broadcast ? kFlagBroadcast : 0) | (w.stop ? kFlagStop : 0) |
                 (w.sync_next_bucket ? kFlagSyncNextBucket : 0));
  out[7] = float(w.sync_every);
}

void encodeSyncWord(const SyncWord& w, std::span<uint8_t, kSyncWordBytes> out) {
  float floats[kSyncWordFloats];
  encodeSyncWord(w, floats);
  for (size_t i = 0; i < kSyncWordFloats; ++i)
    wire::putU32(out.data() + 4 * i, std::bit_cast<uint32_t>(floats[i]));
}

std::optional<SyncWord> decodeSyncWord(std::span<const float, kSyncWordFloats> in) {
  if (in[0] != 1.0f) return std::nullopt;
  auto lo = field(in[1], 0, 0xFFFF), mid = field(in[2], 0, 0xFFFF), hi = field(in[3], 0, 0xFFFF);
  auto topology = field(in[4], 0, kTopologyCount - 1);
  auto pinning = field(in[5], 0, kPinModeCount - 1);
  auto flags = field(in[6], 0, kFlagBroadcast | kFlagStop | kFlagSyncNextBucket);
  auto every = field(in[7], 1, kMaxSyncEvery);
  if (!lo || !mid || !hi || !topology || !pinning || !flags || !every) return std::nullopt;
  SyncWord w;
  w.config = {uint64_t(*lo) | uint64_t(*mid) << 16 | uint64_t(*hi) << 32, Topology(*topology),
              PinMode(*pinning)};
  w.broadcast = (*flags & kFlagBroadcast) != 0;
  w.stop = (*flags & kFlagStop) != 0;
  w.sync_next_bucket = (*flags & kFlagSyncNextBucket) != 0;
  w.sync_every = *every;
  return w;
}

std::optional<SyncWord> decodeSyncWord(std::span<const uint8_t, kSyncWordBytes> in) {
  float floats[kSyncWordFloats];
  for (size_t i = 0; i < kSyncWordFloats; ++i)
    floats[i] = std::bit_cast<float>(wire::getU32(in.data() + 4 * i));
  return decodeSyncWord(std::span<const float, kSyncWordFloats>(floats));
}

ReceiverSource::ReceiverSource(ControlReceiver& receiver, const Verifier& verifier,
                               std::function<void(const Decision&)> on_accepted,
                               std::function<void(uint64_t)> on_rejected, uint32_t topologies,
                               std::function<void(const Decision&)> on_unsupported)
    : receiver_(receiver),
      verifier_(verifier),
      on_accepted_(std::move(on_accepted)),
      on_rejected_(std::move(on_rejected)),
      topologies_(topologies),
      on_unsupported_(std::move(on_unsupported)) {}

std::optional<Decision> ReceiverSource::poll(uint64_t, uint64_t) {
  const uint64_t rejected_before = verifier_.rejectedTotal();
  Decision d;
  const bool got = receiver_.poll(d.config, d.arrival_ns);
  if (on_rejected_ && verifier_.rejectedTotal() != rejected_before)
    on_rejected_(verifier_.rejectedTotal() - rejected_before);
  if (!got) return std::nullopt;
  if (!(topologies_ >> size_t(d.config.topology) & 1)) {
    if (on_rejected_) on_rejected_(1);
    if (on_unsupported_) on_unsupported_(d);
    return std::nullopt;
  }
  if (on_accepted_) on_accepted_(d);
  return d;
}

SwitchDraws::SwitchDraws(int every, uint64_t seed, uint32_t topologies)
    : every_(uint64_t(std::max(every, 0))), seed_(seed), topologies_(topologies) {}

std::optional<Decision> SwitchDraws::poll(uint64_t step, uint64_t newest_epoch) {
  // Step 0 never draws; a run resumed at a multiple of K draws at its first step, as the
  // uninterrupted run did there. Later polls of the same step (each bucket polls) draw nothing.
  if (every_ == 0 || step == 0 || step % every_ != 0 || step == polled_step_) return std::nullopt;
  polled_step_ = step;
  const uint64_t r = mix(seed_ ^ mix(step));
  uint64_t topology = r % kTopologyCount;
  for (size_t i = 0; i < kTopologyCount && !(topologies_ >> topology & 1); ++i)
    topology = (topology + 1) % kTopologyCount;
  return Decision{{newest_epoch + 1, Topology(topology), PinMode((r >> 8) % kPinModeCount)},
                  realtimeNowNs()};
}

ConfigSync::ConfigSync(const SyncOptions& options, ConfigWord initial)
    : options_(options),
      active_(options.adaptive || options.fixed_schedule || options.duration_s > 0),
      config_(initial),
      broadcast_mode_(options.delivery == Delivery::kBroadcast) {}

void ConfigSync::start(Clock::time_point now) {
  if (options_.rank == 0 && options_.duration_s > 0)
    deadline_ = now + std::chrono::duration_cast<Clock::duration>(
                          std::chrono::duration<double>(options_.duration_s));
}

std::optional<Switch> ConfigSync::beginStep() {
  if (!staged_) return std::nullopt;
  std::optional<Switch> s = apply(*staged_);
  staged_.reset();
  return s;
}

bool ConfigSync::broadcastDue(uint64_t step, bool collect) const {
  return active_ && broadcast_mode_ && collect && step >= next_sync_step_;
}

void ConfigSync::writeBroadcast(uint64_t step, Clock::time_point now,
                                std::span<uint8_t, kSyncWordBytes> word) {
  std::fill(word.begin(), word.end(), 0);
  if (options_.rank != 0) return;
  collect(step);
  encodeSyncWord(outgoing(now), word);
}

std::optional<Switch> ConfigSync::readBroadcast(uint64_t step,
                                                std::span<const uint8_t, kSyncWordBytes> word) {
  std::optional<SyncWord> w = decodeSyncWord(word);
  if (!w) return std::nullopt;
  next_sync_step_ = step + w->sync_every;
  broadcast_mode_ = w->broadcast;
  stop_ = stop_ || w->stop;
  return apply(w->config);
}

void ConfigSync::writeTail(uint64_t step, bool collect_decisions, Clock::time_point now,
                           std::span<float> tail) {
  if (!active_) return;
  if (tail.size() < kSyncWordFloats)
    throw std::invalid_argument("config sync: the gradient tail holds fewer than 8 floats");
  std::fill(tail.begin(), tail.end(), 0.0f);
  if (options_.rank != 0) return;
  // Consecutive tails of one step are one bucket apart (its allreduce and read); the first tail of
  // a step keeps the previous step's last figure.
  if (last_tail_step_ == step)
    bucket_seconds_ = std::chrono::duration<double>(now - last_tail_at_).count();
  last_tail_step_ = step;
  last_tail_at_ = now;
  if (collect_decisions) collect(step);
  SyncWord w = outgoing(now);
  // Not for --sync tail (pinned to the tail), nor for --switch-every (switch steps must be a pure
  // function of the step), nor in an --overhead-ab off block (no decisions are collected there).
  w.sync_next_bucket = collect_decisions && options_.adaptive && !options_.fixed_schedule &&
                       options_.delivery != Delivery::kTail &&
                       bucket_seconds_ >= kBucketSyncAboveSeconds;
  encodeSyncWord(w, tail.first<kSyncWordFloats>());
}

std::optional<Switch> ConfigSync::readTail(std::span<const float> tail, bool more_buckets) {
  if (!active_ || tail.size() < kSyncWordFloats) return std::nullopt;
  std::optional<SyncWord> w = decodeSyncWord(tail.first<kSyncWordFloats>());
  bucket_sync_due_ = w && w->sync_next_bucket && more_buckets;
  if (!w) return std::nullopt;
  return takeBetweenBuckets(*w, more_buckets);
}

std::optional<Switch> ConfigSync::readBucketSync(std::span<const uint8_t, kSyncWordBytes> word) {
  bucket_sync_due_ = false;  // the next bucket's tail asks again
  ++bucket_syncs_;
  std::optional<SyncWord> w = decodeSyncWord(word);
  if (!w) return std::nullopt;
  return takeBetweenBuckets(*w, /*more_buckets=*/true);
}

std::optional<Switch> ConfigSync::takeBetweenBuckets(const SyncWord& w, bool more_buckets) {
  broadcast_mode_ = w.broadcast;
  stop_ = stop_ || w.stop;
  if (w.config.epoch <= config_.epoch) return std::nullopt;
  if (more_buckets && w.config.pinning == config_.pinning) {
    staged_.reset();  // an older word staged by an earlier bucket is superseded
    return apply(w.config);
  }
  staged_ = w.config;
  return std::nullopt;
}

ConfigWord ConfigSync::nextStepConfig() const {
  return staged_ && staged_->epoch > config_.epoch ? *staged_ : config_;
}

void ConfigSync::observe(double step_seconds, double allreduce_seconds) {
  step_seconds_ewma_ =
      step_seconds_ewma_ == 0 ? step_seconds : 0.9 * step_seconds_ewma_ + 0.1 * step_seconds;
  allreduce_seconds_ewma_ = allreduce_seconds_ewma_ == 0
                                ? allreduce_seconds
                                : 0.9 * allreduce_seconds_ewma_ + 0.1 * allreduce_seconds;
}

void ConfigSync::collect(uint64_t step) {
  if (options_.rank != 0) return;
  for (DecisionSource* source : sources_) {
    std::optional<Decision> d = source->poll(step, newestEpoch());
    if (!d) continue;
    if (d->config.epoch <= newestEpoch()) {
      ++stale_;
    } else if (d->config.epoch > kMaxSyncEpoch) {
      ++unencodable_;
    } else {
      pending_ = *d;
    }
  }
}

uint64_t ConfigSync::newestEpoch() const {
  return std::max(config_.epoch, pending_ ? pending_->config.epoch : 0);
}

SyncWord ConfigSync::outgoing(Clock::time_point now) const {
  SyncWord w;
  w.config = pending_ && pending_->config.epoch > config_.epoch ? pending_->config : config_;
  // Without --adaptive (a --duration-only run) there are no decisions to deliver faster.
  w.broadcast =
      options_.delivery == Delivery::kBroadcast ||
      (options_.delivery == Delivery::kAuto && options_.adaptive && !options_.fixed_schedule &&
       options_.buckets < 2 && allreduce_seconds_ewma_ > kBroadcastAboveAllreduceSeconds);
  w.stop = now >= deadline_;
  if (step_seconds_ewma_ > 0 && !options_.fixed_schedule)
    w.sync_every =
        uint32_t(std::clamp(kSyncIntervalSeconds / step_seconds_ewma_, 1.0, double(kMaxSyncEvery)));
  return w;
}

std::optional<Switch> ConfigSync::apply(const ConfigWord& next) {
  if (next.epoch <= config_.epoch) return std::nullopt;
  Switch s{config_, next, options_.rank == 0 && pending_ ? pending_->arrival_ns : 0};
  config_ = next;
  if (pending_ && pending_->config.epoch <= config_.epoch) pending_.reset();
  return s;
}

}  // namespace bpftrain::trainer::control
