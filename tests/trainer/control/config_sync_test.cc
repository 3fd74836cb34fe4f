// The control-delivery protocol without a network: N ranks' ConfigSync driven through the step
// sequence the trainer runs, with the test as the collective (the allreduce sums the tails, the
// broadcast copies rank 0's bytes). Asserts what ranks observe: the word round-trips, every rank
// switches at the same step, delivery moves between tail and broadcast, --duration stops all
// ranks after the same step, stale and duplicate decisions change nothing.
#include "trainer/control/config_sync.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <numeric>
#include <set>
#include <utility>

#include "tests/support/signed_control.h"
#include "trainer/control/control_receiver.h"

namespace bpftrain::trainer::control {
namespace {

using Clock = ConfigSync::Clock;
using namespace std::chrono_literals;
using Tail = std::array<float, kSyncWordFloats>;

SyncWord encodeDecode(const SyncWord& w) {
  Tail floats{};
  encodeSyncWord(w, floats);
  std::optional<SyncWord> back = decodeSyncWord(std::span<const float, kSyncWordFloats>(floats));
  EXPECT_TRUE(back.has_value());
  std::array<uint8_t, kSyncWordBytes> bytes{};
  encodeSyncWord(w, bytes);
  std::optional<SyncWord> from_bytes =
      decodeSyncWord(std::span<const uint8_t, kSyncWordBytes>(bytes));
  EXPECT_TRUE(from_bytes.has_value());
  EXPECT_EQ(back, from_bytes);
  return back.value_or(SyncWord{});
}

TEST(SyncWord, RoundTripsEdgeValues) {
  const uint64_t epochs[] = {0,           1,          0xFFFF,         0x10000,
                             0xFFFFFFFFu, 1ull << 32, 0x123456789ABC, kMaxSyncEpoch};
  for (uint64_t epoch : epochs)
    for (int t = 0; t < kTopologyCount; ++t)
      for (int p = 0; p < kPinModeCount; ++p)
        for (int flags = 0; flags < 4; ++flags)
          for (uint32_t every : {1u, 2u, 999u, kMaxSyncEvery}) {
            SyncWord w{{epoch, Topology(t), PinMode(p)}, (flags & 1) != 0, (flags & 2) != 0, every};
            ASSERT_EQ(encodeDecode(w), w) << "epoch " << epoch << " topology " << t << " pinning "
                                          << p << " flags " << flags << " every " << every;
          }
}

// The byte form is the eight floats' IEEE-754 bits, little-endian, whatever the host.
TEST(SyncWord, BytesAreLittleEndianFloatBits) {
  SyncWord w{{0x0003'0002'0001, Topology::kBcube, PinMode::kNuma}, true, true, 25};
  std::array<uint8_t, kSyncWordBytes> bytes{};
  encodeSyncWord(w, bytes);
  const std::array<uint8_t, kSyncWordBytes> expected{
      0x00, 0x00, 0x80, 0x3F,  // marker 1.0
      0x00, 0x00, 0x80, 0x3F,  // epoch bits 0..15 = 1
      0x00, 0x00, 0x00, 0x40,  // epoch bits 16..31 = 2
      0x00, 0x00, 0x40, 0x40,  // epoch bits 32..47 = 3
      0x00, 0x00, 0x00, 0x40,  // bcube = 2
      0x00, 0x00, 0x40, 0x40,  // numa = 3
      0x00, 0x00, 0x40, 0x40,  // broadcast | stop = 3
      0x00, 0x00, 0xC8, 0x41,  // sync every 25
  };
  EXPECT_EQ(bytes, expected);
}

// What makes the tail work: the other ranks' zeros, summed in any order, leave rank 0's word.
TEST(SyncWord, SumWithOtherRanksZerosIsRankZerosWord) {
  SyncWord w{{kMaxSyncEpoch, Topology::kHierarchical, PinMode::kSpread}, true, false, 1000};
  Tail word{};
  encodeSyncWord(w, word);
  for (int world : {2, 3, 8, 64}) {
    for (int position = 0; position < world; ++position) {  // where rank 0 sits in the sum order
      Tail sum{};
      for (int r = 0; r < world; ++r)
        for (size_t i = 0; i < kSyncWordFloats; ++i) sum[i] += r == position ? word[i] : 0.0f;
      EXPECT_EQ(decodeSyncWord(std::span<const float, kSyncWordFloats>(sum)), w)
          << "world " << world << " position " << position;
    }
  }
}

TEST(SyncWord, DecodeRefusesWhatIsNotRankZerosWord) {
  Tail good{};
  encodeSyncWord(SyncWord{{7, Topology::kRing, PinMode::kNone}, false, false, 3}, good);
  auto decodes = [](Tail t) {
    return decodeSyncWord(std::span<const float, kSyncWordFloats>(t)).has_value();
  };
  ASSERT_TRUE(decodes(good));
  EXPECT_FALSE(decodes(Tail{})) << "a world where rank 0 wrote nothing";
  auto with = [&](size_t i, float v) {
    Tail t = good;
    t[i] = v;
    return t;
  };
  EXPECT_FALSE(decodes(with(0, 2))) << "two ranks wrote a word";
  EXPECT_FALSE(decodes(with(1, 0.5f))) << "not an integer";
  EXPECT_FALSE(decodes(with(2, 65536))) << "epoch piece above 16 bits";
  EXPECT_FALSE(decodes(with(3, -1)));
  EXPECT_FALSE(decodes(with(4, float(kTopologyCount)))) << "unknown topology";
  EXPECT_FALSE(decodes(with(5, float(kPinModeCount)))) << "unknown pinning";
  EXPECT_FALSE(decodes(with(6, 8))) << "unknown flag";
  EXPECT_FALSE(decodes(with(7, 0))) << "sync_every 0";
  EXPECT_FALSE(decodes(with(7, float(kMaxSyncEvery + 1))));
  EXPECT_FALSE(decodes(with(1, std::numeric_limits<float>::quiet_NaN())));
  EXPECT_FALSE(decodes(with(4, std::numeric_limits<float>::infinity())));
}

TEST(SyncWord, EncodeRefusesValuesTheWordCannotCarry) {
  Tail t{};
  EXPECT_THROW(encodeSyncWord(SyncWord{{kMaxSyncEpoch + 1, {}, {}}, false, false, 1}, t),
               std::out_of_range);
  EXPECT_THROW(encodeSyncWord(SyncWord{{1, {}, {}}, false, false, 0}, t), std::out_of_range);
  EXPECT_THROW(encodeSyncWord(SyncWord{{1, {}, {}}, false, false, kMaxSyncEvery + 1}, t),
               std::out_of_range);
}

// Decisions handed out at given steps; counts the polls.
class ScriptedSource : public DecisionSource {
 public:
  std::optional<Decision> poll(uint64_t step, uint64_t newest_epoch) override {
    ++polls[step];
    newest_seen[step] = newest_epoch;
    auto it = script.find(step);
    if (it == script.end()) return std::nullopt;
    return it->second;
  }
  std::map<uint64_t, Decision> script;
  std::map<uint64_t, int> polls;
  std::map<uint64_t, uint64_t> newest_seen;
};

Decision decision(uint64_t epoch, Topology t = Topology::kBcube, PinMode p = PinMode::kCompact,
                  uint64_t arrival_ns = 0) {
  return {{epoch, t, p}, arrival_ns};
}

// N ranks running the trainer's step sequence, the allreduce in `buckets` buckets; records what
// each rank observed.
class World {
 public:
  World(int n, SyncOptions options, ConfigWord initial = {}, size_t buckets = 1)
      : buckets_(buckets) {
    for (int r = 0; r < n; ++r) {
      options.rank = r;
      syncs_.emplace_back(options, initial);
    }
    applied_.resize(size_t(n));
    applied_bucket_.resize(size_t(n));
    used_buckets_.resize(size_t(n));
    broadcasts_.resize(size_t(n));
    bucket_syncs_.resize(size_t(n));
    stopped_after_.resize(size_t(n));
    arrivals_.resize(size_t(n));
    used_.resize(size_t(n));
  }
  ConfigSync& rank(int r) { return syncs_[size_t(r)]; }
  int size() const { return int(syncs_.size()); }
  void start(Clock::time_point t) {
    for (ConfigSync& s : syncs_) s.start(t);
  }

  // One step at rank 0's time `now` (other ranks' clocks are `now + skew`, which must not matter);
  // each bucket takes `bucket` on every clock. `during_bucket(step, b)` runs while bucket b's
  // allreduce is in flight (its tails written, not yet read): a decision arriving then.
  void step(uint64_t step, Clock::time_point now, double step_s = 0.001,
            double allreduce_s = 0.0005, bool collect = true, Clock::duration skew = 1h,
            Clock::duration bucket = {},
            const std::function<void(uint64_t, size_t)>& during_bucket = {}) {
    auto clock = [&](size_t r) { return r == 0 ? now : now + skew; };
    for (size_t r = 0; r < syncs_.size(); ++r)
      if (auto s = syncs_[r].beginStep()) record(r, *s, step);
    const bool due = syncs_[0].broadcastDue(step, collect);
    for (size_t r = 1; r < syncs_.size(); ++r)
      ASSERT_EQ(syncs_[r].broadcastDue(step, collect), due) << "rank " << r << " step " << step;
    if (due) {
      std::vector<std::array<uint8_t, kSyncWordBytes>> words(syncs_.size());
      for (size_t r = 0; r < syncs_.size(); ++r) syncs_[r].writeBroadcast(step, clock(r), words[r]);
      for (size_t r = 0; r < syncs_.size(); ++r) {
        words[r] = words[0];  // the broadcast
        broadcasts_[r].push_back(step);
        if (auto s = syncs_[r].readBroadcast(step, words[r])) record(r, *s, step);
      }
    }
    for (size_t r = 0; r < syncs_.size(); ++r) used_[r][step] = syncs_[r].config();
    for (size_t b = 0; b < buckets_; ++b) {
      for (size_t r = 0; r < syncs_.size(); ++r) used_buckets_[r][{step, b}] = syncs_[r].config();
      // The bucket's tails, summed across ranks (its allreduce).
      std::vector<Tail> tails(syncs_.size(), Tail{});
      const auto at = [&](size_t r) { return clock(r) + int64_t(b) * bucket; };
      for (size_t r = 0; r < syncs_.size(); ++r)
        syncs_[r].writeTail(step, collect, at(r), tails[r]);
      if (during_bucket) during_bucket(step, b);
      Tail sum{};
      for (const Tail& t : tails)
        for (size_t i = 0; i < kSyncWordFloats; ++i) sum[i] += t[i];
      for (size_t r = 0; r < syncs_.size(); ++r)
        if (auto s = syncs_[r].readTail(sum, b + 1 < buckets_)) record(r, *s, step, b + 1);
      // The trainer's bucket sync: a broadcast of rank 0's word before the next bucket.
      const bool sync = syncs_[0].bucketSyncDue();
      for (size_t r = 1; r < syncs_.size(); ++r)
        ASSERT_EQ(syncs_[r].bucketSyncDue(), sync) << "rank " << r << " step " << step << " " << b;
      if (!sync) continue;
      EXPECT_LT(b + 1, buckets_) << "a bucket sync after the step's last bucket";
      std::vector<std::array<uint8_t, kSyncWordBytes>> words(syncs_.size());
      for (size_t r = 0; r < syncs_.size(); ++r) syncs_[r].writeBroadcast(step, at(r), words[r]);
      for (size_t r = 0; r < syncs_.size(); ++r) {
        words[r] = words[0];
        bucket_syncs_[r].emplace_back(step, b + 1);
        if (auto s = syncs_[r].readBucketSync(words[r])) record(r, *s, step, b + 1);
      }
    }
    for (size_t r = 0; r < syncs_.size(); ++r) {
      syncs_[r].observe(step_s, allreduce_s);
      if (syncs_[r].stopRequested() && !stopped_after_[r]) stopped_after_[r] = step;
    }
  }

  // rank -> epoch -> step it was applied at
  const std::map<uint64_t, uint64_t>& applied(int r) const { return applied_[size_t(r)]; }
  // rank -> epoch -> buckets of its step done before it applied (0: at the step's start)
  const std::map<uint64_t, size_t>& appliedBucket(int r) const {
    return applied_bucket_[size_t(r)];
  }
  // (step, bucket) -> the configuration that bucket's allreduce ran with
  const std::map<std::pair<uint64_t, size_t>, ConfigWord>& usedBuckets(int r) const {
    return used_buckets_[size_t(r)];
  }
  const std::vector<uint64_t>& broadcasts(int r) const { return broadcasts_[size_t(r)]; }
  // (step, bucket) each bucket sync ran before
  const std::vector<std::pair<uint64_t, size_t>>& bucketSyncs(int r) const {
    return bucket_syncs_[size_t(r)];
  }
  std::optional<uint64_t> stoppedAfter(int r) const { return stopped_after_[size_t(r)]; }
  // step -> the configuration that step's allreduce ran with
  const std::map<uint64_t, ConfigWord>& used(int r) const { return used_[size_t(r)]; }
  uint64_t arrival(int r, uint64_t epoch) const { return arrivals_[size_t(r)].at(epoch); }
  // Every rank applied the same epochs at the same steps and holds the same configuration.
  void expectRanksAgree() const {
    for (int r = 1; r < size(); ++r) {
      EXPECT_EQ(applied(r), applied(0)) << "rank " << r;
      EXPECT_EQ(appliedBucket(r), appliedBucket(0)) << "rank " << r;
      EXPECT_EQ(usedBuckets(r), usedBuckets(0)) << "rank " << r;
      EXPECT_EQ(syncs_[size_t(r)].config(), syncs_[0].config()) << "rank " << r;
      EXPECT_EQ(broadcasts(r), broadcasts(0)) << "rank " << r;
      EXPECT_EQ(bucketSyncs(r), bucketSyncs(0)) << "rank " << r;
    }
  }

 private:
  void record(size_t r, const Switch& s, uint64_t step, size_t bucket = 0) {
    EXPECT_GT(s.to.epoch, s.from.epoch);
    EXPECT_TRUE(applied_[r].emplace(s.to.epoch, step).second)
        << "rank " << r << " applied epoch " << s.to.epoch << " twice";
    applied_bucket_[r][s.to.epoch] = bucket;
    arrivals_[r][s.to.epoch] = s.arrival_ns;
  }
  size_t buckets_;
  std::vector<ConfigSync> syncs_;
  std::vector<std::map<uint64_t, uint64_t>> applied_;
  std::vector<std::map<uint64_t, size_t>> applied_bucket_;
  std::vector<std::map<std::pair<uint64_t, size_t>, ConfigWord>> used_buckets_;
  std::vector<std::vector<uint64_t>> broadcasts_;
  std::vector<std::vector<std::pair<uint64_t, size_t>>> bucket_syncs_;
  std::vector<std::optional<uint64_t>> stopped_after_;
  std::vector<std::map<uint64_t, uint64_t>> arrivals_;
  std::vector<std::map<uint64_t, ConfigWord>> used_;
};

SyncOptions adaptive(Delivery d = Delivery::kAuto) {
  SyncOptions o;
  o.adaptive = true;
  o.delivery = d;
  return o;
}

TEST(ConfigSync, TailDecisionAppliesAtTheNextStepOnEveryRank) {
  World w(4, adaptive());
  ScriptedSource src;
  src.script[10] = decision(1, Topology::kHalvingDoubling, PinMode::kSpread, 12345);
  w.rank(0).addSource(src);
  const auto t0 = Clock::now();
  for (uint64_t s = 0; s < 20; ++s) w.step(s, t0 + s * 1ms);
  ASSERT_EQ(w.applied(0), (std::map<uint64_t, uint64_t>{{1, 11}}));
  w.expectRanksAgree();
  EXPECT_EQ(w.rank(3).config(), (ConfigWord{1, Topology::kHalvingDoubling, PinMode::kSpread}));
  EXPECT_EQ(w.arrival(0, 1), 12345u) << "rank 0 logs when its decision arrived";
  EXPECT_EQ(w.arrival(2, 1), 0u);
  EXPECT_FALSE(w.rank(0).broadcastMode());
  EXPECT_TRUE(w.broadcasts(0).empty());
}

// Buckets: a decision that changes the topology alone, read after one bucket, runs the step's
// remaining buckets on every rank; one that also changes pinning waits for the next step; one
// read after the last bucket applies at the next step.
TEST(ConfigSync, TopologyDecisionAppliesAtTheNextBucketPinningAtTheNextStep) {
  World w(4, adaptive(), {}, 4);
  ScriptedSource src;  // polled at every bucket: the decision is taken at its step's first
  src.script[10] = decision(1, Topology::kHierarchical, PinMode::kNone, 777);
  src.script[20] = decision(2, Topology::kRing, PinMode::kCompact);
  w.rank(0).addSource(src);
  for (uint64_t s = 0; s < 30; ++s) w.step(s, Clock::now());
  w.expectRanksAgree();
  EXPECT_EQ(w.applied(0), (std::map<uint64_t, uint64_t>{{1, 10}, {2, 21}}));
  EXPECT_EQ(w.appliedBucket(0), (std::map<uint64_t, size_t>{{1, 1}, {2, 0}}));
  for (int r = 0; r < 4; ++r) {
    const auto& used = w.usedBuckets(r);
    EXPECT_EQ(used.at({10, 0}).topology, Topology::kRing) << "rank " << r;
    for (size_t b = 1; b < 4; ++b)
      EXPECT_EQ(used.at({10, b}).topology, Topology::kHierarchical) << "rank " << r << " " << b;
    for (size_t b = 0; b < 4; ++b) {
      EXPECT_EQ(used.at({20, b}).pinning, PinMode::kNone) << "rank " << r << " bucket " << b;
      EXPECT_EQ(used.at({21, b}), (ConfigWord{2, Topology::kRing, PinMode::kCompact}));
    }
  }
  EXPECT_EQ(w.arrival(0, 1), 777u);
  EXPECT_EQ(src.polls[10], 4) << "polled at every bucket";
  EXPECT_EQ(w.rank(0).staleDecisions(), 3u + 3u) << "the script's repeats within a step";
}

// A decision rank 0 collects for the last bucket's tail applies at the start of the next step (no
// bucket of this step remains to switch).
TEST(ConfigSync, ADecisionInTheLastBucketAppliesAtTheNextStep) {
  World w(3, adaptive(), {}, 4);
  // Arrives at the given poll (4 per step): poll 4*5+3 is step 5's last bucket.
  struct AtPoll : DecisionSource {
    std::optional<Decision> poll(uint64_t, uint64_t) override {
      return n++ == 4 * 5 + 3 ? std::optional(decision(1, Topology::kBcube, PinMode::kNone))
                              : std::nullopt;
    }
    int n = 0;
  } src;
  w.rank(0).addSource(src);
  for (uint64_t s = 0; s < 8; ++s) w.step(s, Clock::now());
  w.expectRanksAgree();
  EXPECT_EQ(w.applied(0), (std::map<uint64_t, uint64_t>{{1, 6}}));
  EXPECT_EQ(w.appliedBucket(0), (std::map<uint64_t, size_t>{{1, 0}}));
  EXPECT_EQ(w.usedBuckets(1).at({6, 0}).topology, Topology::kBcube);
}

// A decision the test hands in at any point of a step (World::step's during_bucket).
struct Inbox : DecisionSource {
  std::optional<Decision> poll(uint64_t, uint64_t) override {
    return std::exchange(next, std::nullopt);
  }
  std::optional<Decision> next;
};

// Slow buckets: rank 0's tail after a bucket that took kBucketSyncAboveSeconds asks for a bucket
// sync, a broadcast before the next bucket, so a decision that arrives while bucket 1's allreduce
// is in flight runs bucket 2 (with fast buckets it rides bucket 2's tail and runs bucket 3). Every
// rank syncs before the same buckets; the first slow step syncs from its third bucket on (its
// first tail still carries the last step's fast figure), and fast buckets stop the syncs.
TEST(ConfigSync, SlowBucketsSyncBeforeTheNextBucketSoADecisionRunsItsNextBucket) {
  for (const bool slow : {false, true}) {
    World w(4, adaptive(), {}, 4);
    Inbox src;
    w.rank(0).addSource(src);
    const auto t0 = Clock::now();
    const Clock::duration bucket = slow ? 350ms : 20ms;
    for (uint64_t s = 0; s < 5; ++s) w.step(s, t0 + s * 2s, 1.6, 1.4, true, 1h, bucket);
    w.step(5, t0 + 10s, 1.6, 1.4, true, 1h, bucket, [&](uint64_t, size_t b) {
      if (b == 1) src.next = decision(1, Topology::kHierarchical, PinMode::kNone, 42);
    });
    w.expectRanksAgree();
    ASSERT_EQ(w.applied(0), (std::map<uint64_t, uint64_t>{{1, 5}})) << "slow " << slow;
    EXPECT_EQ(w.appliedBucket(0).at(1), slow ? 2u : 3u) << "slow " << slow;
    EXPECT_EQ(w.usedBuckets(2).at({5, 2}).topology,
              slow ? Topology::kHierarchical : Topology::kRing);
    EXPECT_EQ(w.arrival(0, 1), 42u);
    if (!slow) {
      EXPECT_TRUE(w.bucketSyncs(0).empty());
      continue;
    }
    EXPECT_EQ(w.bucketSyncs(0).front(), (std::pair<uint64_t, size_t>{0, 2}));
    EXPECT_EQ(w.bucketSyncs(0).size(), 2u + 5 * 3) << "3 a step after the first";
    EXPECT_EQ(w.rank(1).bucketSyncs(), w.bucketSyncs(0).size()) << "counted";
    // Fast again: the first fast bucket's tail stops them.
    const size_t before = w.bucketSyncs(0).size();
    w.step(6, t0 + 12s, 0.1, 0.05, true, 1h, 20ms);
    EXPECT_EQ(w.bucketSyncs(0).size(), before + 1) << "after the slow step's last figure";
    w.step(7, t0 + 13s, 0.1, 0.05, true, 1h, 20ms);
    EXPECT_EQ(w.bucketSyncs(0).size(), before + 1);
    w.expectRanksAgree();
  }
}

// A bucket sync delivers a pinning change (or a stop) like a tail read mid-step: staged for the
// next step. --sync tail, --switch-every and --overhead-ab's off blocks never sync between buckets.
TEST(ConfigSync, BucketSyncStagesPinningAndIsOffWhereTheTailOnlyOrFixedStepsRule) {
  {
    World w(3, adaptive(), {}, 4);
    Inbox src;
    w.rank(0).addSource(src);
    const auto t0 = Clock::now();
    for (uint64_t s = 0; s < 5; ++s)
      w.step(s, t0 + s * 2s, 1.6, 1.4, true, 1h, 350ms, [&](uint64_t step, size_t b) {
        if (step == 3 && b == 1) src.next = decision(1, Topology::kHierarchical, PinMode::kCompact);
      });
    w.expectRanksAgree();
    EXPECT_EQ(w.applied(0), (std::map<uint64_t, uint64_t>{{1, 4}}));
    EXPECT_EQ(w.appliedBucket(0).at(1), 0u) << "pinning waits for the step boundary";
    EXPECT_EQ(w.usedBuckets(1).at({3, 3}).topology, Topology::kRing);
    EXPECT_TRUE(std::count(w.bucketSyncs(0).begin(), w.bucketSyncs(0).end(),
                           std::pair<uint64_t, size_t>{3, 2}))
        << "a bucket sync ran before bucket 2, and its word only staged the pinning";
  }
  SyncOptions tail_only = adaptive(Delivery::kTail);
  SyncOptions fixed = adaptive();
  fixed.fixed_schedule = true;
  for (const SyncOptions& o : {tail_only, fixed}) {
    World w(3, o, {}, 4);
    const auto t0 = Clock::now();
    for (uint64_t s = 0; s < 5; ++s) w.step(s, t0 + s * 2s, 1.6, 1.4, true, 1h, 350ms);
    EXPECT_TRUE(w.bucketSyncs(0).empty());
    w.expectRanksAgree();
  }
  World off(3, adaptive(), {}, 4);
  const auto t0 = Clock::now();
  for (uint64_t s = 0; s < 5; ++s) off.step(s, t0 + s * 2s, 1.6, 1.4, /*collect=*/false, 1h, 350ms);
  EXPECT_TRUE(off.bucketSyncs(0).empty());
}

// The flag round-trips and a word that carries it decodes; none above the known flags does.
TEST(SyncWord, BucketSyncFlagRoundTrips) {
  SyncWord w;
  w.config = {7, Topology::kRing, PinMode::kNone};
  w.sync_next_bucket = true;
  w.broadcast = true;
  EXPECT_EQ(encodeDecode(w), w);
  Tail floats{};
  encodeSyncWord(w, floats);
  floats[6] = 8;
  EXPECT_FALSE(decodeSyncWord(std::span<const float, kSyncWordFloats>(floats)).has_value());
}

TEST(ConfigSync, OnlyRankZeroTakesDecisions) {
  World w(2, adaptive());
  ScriptedSource zero, one;
  zero.script[1] = decision(1);
  one.script[1] = decision(9, Topology::kRing, PinMode::kNuma);
  w.rank(0).addSource(zero);
  w.rank(1).addSource(one);  // a source on another rank is never polled
  for (uint64_t s = 0; s < 5; ++s) w.step(s, Clock::now());
  EXPECT_TRUE(one.polls.empty());
  EXPECT_EQ(w.applied(1), (std::map<uint64_t, uint64_t>{{1, 2}}));
  w.expectRanksAgree();
}

class Deliveries : public ::testing::TestWithParam<Delivery> {};
INSTANTIATE_TEST_SUITE_P(ConfigSync, Deliveries,
                         ::testing::Values(Delivery::kTail, Delivery::kBroadcast),
                         [](const auto& info) {
                           return std::string(kDeliveryNames.name(info.param));
                         });

// --switch-every: the same switches at the same steps on every rank.
TEST_P(Deliveries, SwitchDrawsApplyAtTheSameStepsOnEveryRank) {
  SyncOptions o;
  o.delivery = GetParam();
  o.fixed_schedule = true;
  World w(3, o);
  SwitchDraws draws(5, 11);
  w.rank(0).addSource(draws);
  std::set<Topology> topologies;
  for (uint64_t s = 0; s < 100; ++s) {
    w.step(s, Clock::now(), 0.001, 0.2);
    topologies.insert(w.rank(0).config().topology);
  }
  w.expectRanksAgree();
  // Drawn at 5, 10, ... 95; the tail delivers at the next step, the broadcast at the same one.
  const uint64_t lag = GetParam() == Delivery::kTail ? 1 : 0;
  ASSERT_EQ(w.applied(0).size(), 19u);
  for (auto [epoch, step] : w.applied(0)) EXPECT_EQ(step, 5 * epoch + lag) << "epoch " << epoch;
  EXPECT_EQ(topologies.size(), size_t(kTopologyCount));
  // A fixed schedule broadcasts every step when told to, and never moves there by itself (the
  // 200 ms allreduces would move auto delivery).
  EXPECT_EQ(w.broadcasts(0).size(), GetParam() == Delivery::kBroadcast ? 100u : 0u);
}

// Checkpoint + resume: a run resumed from the configuration a checkpoint holds (nextStepConfig()
// after the last step done) runs every later step with the configuration the uninterrupted run
// used, also when the checkpoint falls on a draw step or between a draw and its application.
TEST_P(Deliveries, ResumedSwitchDrawsMatchTheUninterruptedRun) {
  SyncOptions o;
  o.delivery = GetParam();
  o.fixed_schedule = true;
  World whole(2, o);
  SwitchDraws draws(5, 11);
  whole.rank(0).addSource(draws);
  std::map<uint64_t, ConfigWord> checkpoint_at;  // step done -> what a checkpoint then holds
  for (uint64_t s = 0; s < 60; ++s) {
    whole.step(s, Clock::now());
    checkpoint_at[s + 1] = whole.rank(0).nextStepConfig();
  }
  for (uint64_t from : {45u, 46u, 50u, 51u, 53u}) {
    World resumed(2, o, checkpoint_at.at(from));
    SwitchDraws again(5, 11);
    resumed.rank(0).addSource(again);
    for (uint64_t s = from; s < 60; ++s) resumed.step(s, Clock::now());
    resumed.expectRanksAgree();
    for (uint64_t s = from; s < 60; ++s)
      EXPECT_EQ(resumed.used(1).at(s), whole.used(1).at(s))
          << "resumed at " << from << " step " << s;
  }
}

// auto: above 40 ms allreduces every rank moves to the broadcast at the same step, syncs at
// boundaries spaced to about 25 ms of steps, and moves back once allreduces are fast again.
TEST(ConfigSync, AutoMovesBetweenTailAndBroadcastWithTheAllreduceTime) {
  World w(3, adaptive());
  ScriptedSource src;
  w.rank(0).addSource(src);
  const auto t0 = Clock::now();
  uint64_t s = 0;
  for (; s < 20; ++s) w.step(s, t0, 0.004, 0.010);
  EXPECT_FALSE(w.rank(0).broadcastMode());
  EXPECT_TRUE(w.broadcasts(0).empty());
  // Slow allreduces: the EWMA passes 40 ms, rank 0 raises the flag, all ranks follow at once.
  uint64_t moved = 0;
  for (; s < 60; ++s) {
    w.step(s, t0, 0.004, 0.200);
    for (int r = 1; r < 3; ++r) ASSERT_EQ(w.rank(r).broadcastMode(), w.rank(0).broadcastMode());
    if (!moved && w.rank(0).broadcastMode()) moved = s;
  }
  ASSERT_GT(moved, 20u);
  ASSERT_FALSE(w.broadcasts(0).empty());
  EXPECT_EQ(w.broadcasts(0).front(), moved + 1) << "the first sync is the next boundary";
  // 25 ms / 4 ms steps: every 6th boundary.
  for (size_t i = 1; i < w.broadcasts(0).size(); ++i)
    EXPECT_EQ(w.broadcasts(0)[i] - w.broadcasts(0)[i - 1], 6u);
  // A decision collected at a broadcast boundary applies there, before that step's allreduce.
  const uint64_t next = w.broadcasts(0).back() + 6;
  src.script[next] = decision(1);
  for (; s <= next; ++s) w.step(s, t0, 0.004, 0.200);
  EXPECT_EQ(w.applied(0).at(1), next);
  // One arriving between syncs still rides the tail of that step's allreduce.
  src.script[next + 2] = decision(2);
  for (; s < next + 4; ++s) w.step(s, t0, 0.004, 0.200);
  EXPECT_EQ(w.applied(0).at(2), next + 3);
  // Fast again: back to the tail on every rank at the same step, no more broadcasts.
  for (; s < 200 && w.rank(0).broadcastMode(); ++s) w.step(s, t0, 0.004, 0.001);
  EXPECT_FALSE(w.rank(0).broadcastMode());
  const size_t syncs = w.broadcasts(0).size();
  for (const uint64_t end = s + 50; s < end; ++s) w.step(s, t0, 0.004, 0.001);
  EXPECT_EQ(w.broadcasts(0).size(), syncs);
  w.expectRanksAgree();
}

// With the allreduce in buckets auto stays in the tail however slow the allreduce: each bucket's
// tail delivers within the step, and a broadcast at every boundary would be a sync point of its
// own. A decision collected during compute rides the first bucket's tail and applies from the
// second, in that step.
TEST(ConfigSync, AutoStaysInTheTailWhenTheAllreduceRunsInBuckets) {
  SyncOptions o = adaptive();
  o.buckets = 4;
  World w(3, o, {}, 4);
  ScriptedSource src;
  w.rank(0).addSource(src);
  src.script[30] = decision(1, Topology::kHierarchical, PinMode::kNone);
  const auto t0 = Clock::now();
  for (uint64_t s = 0; s < 60; ++s) w.step(s, t0, 0.004, 0.200);
  EXPECT_FALSE(w.rank(0).broadcastMode());
  EXPECT_TRUE(w.broadcasts(0).empty());
  EXPECT_EQ(w.applied(0).at(1), 30u);
  EXPECT_EQ(w.appliedBucket(0).at(1), 1u);
  w.expectRanksAgree();
}

// The move needs an average above 40 ms (the first step's time is the average); the spacing is
// clamped to 1..1000 steps.
TEST(ConfigSync, BroadcastThresholdAndSpacingBounds) {
  for (double allreduce_s : {kBroadcastAboveAllreduceSeconds, 0.0401}) {
    World w(2, adaptive());
    for (uint64_t s = 0; s < 2; ++s) w.step(s, Clock::now(), 0.05, allreduce_s);
    EXPECT_EQ(w.rank(1).broadcastMode(), allreduce_s > kBroadcastAboveAllreduceSeconds)
        << allreduce_s;
  }

  World slow_steps(2, adaptive(Delivery::kBroadcast));
  for (uint64_t s = 0; s < 10; ++s) slow_steps.step(s, Clock::now(), 1.0, 0.5);
  EXPECT_EQ(slow_steps.broadcasts(0), (std::vector<uint64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
  World fast_steps(2, adaptive(Delivery::kBroadcast));
  for (uint64_t s = 0; s < 2500; ++s) fast_steps.step(s, Clock::now(), 1e-9, 1e-9);
  EXPECT_EQ(fast_steps.broadcasts(0), (std::vector<uint64_t>{0, 1, 1001, 2001}));
  fast_steps.expectRanksAgree();
}

TEST(ConfigSync, FixedDeliveriesAndRunsWithoutDecisionsNeverMove) {
  struct Case {
    std::string name;
    SyncOptions options;
    bool broadcast;
  };
  SyncOptions duration_only;
  duration_only.duration_s = 3600;
  SyncOptions draws = adaptive();
  draws.fixed_schedule = true;
  const Case cases[] = {{"--sync tail", adaptive(Delivery::kTail), false},
                        {"--sync broadcast", adaptive(Delivery::kBroadcast), true},
                        {"--duration only", duration_only, false},
                        {"--switch-every", draws, false}};
  for (const Case& c : cases) {
    World w(2, c.options);
    for (uint64_t s = 0; s < 60; ++s) {
      w.step(s, Clock::now(), 0.3, s < 30 ? 0.2 : 0.001);
      ASSERT_EQ(w.rank(1).broadcastMode(), c.broadcast) << c.name << " step " << s;
    }
  }
}

TEST(ConfigSync, WithoutDecisionsOrDeadlineTheTailIsLeftAlone) {
  ConfigSync sync(SyncOptions{}, ConfigWord{0, Topology::kBcube, PinMode::kNone});
  EXPECT_FALSE(sync.active());
  Tail tail;
  tail.fill(2.5f);  // whatever the gradients left there
  sync.writeTail(0, true, Clock::now(), tail);
  EXPECT_EQ(tail[0], 2.5f);
  EXPECT_FALSE(sync.broadcastDue(0, true));
  EXPECT_EQ(sync.config().topology, Topology::kBcube);
}

// --duration: rank 0's clock decides; ranks whose clocks run ahead do not stop early.
TEST_P(Deliveries, DurationStopsEveryRankAfterTheSameStep) {
  SyncOptions o;
  o.delivery = GetParam();
  o.duration_s = 1.0;
  World w(4, o);
  const auto t0 = Clock::now();
  w.start(t0);
  for (uint64_t s = 0; s < 40; ++s) {
    w.step(s, t0 + s * 30ms, 0.030, 0.001, true, 1h);
    if (s < 34) {
      ASSERT_FALSE(w.rank(1).stopRequested()) << "step " << s;
    }
  }
  for (int r = 0; r < 4; ++r) EXPECT_EQ(w.stoppedAfter(r), 34u) << "rank " << r;  // 34 × 30 ms
}

TEST(ConfigSync, NoDeadlineNoStop) {
  World w(2, adaptive());
  w.start(Clock::now() - 24h);
  for (uint64_t s = 0; s < 10; ++s) w.step(s, Clock::now());
  EXPECT_FALSE(w.stoppedAfter(0));
  EXPECT_FALSE(w.stoppedAfter(1));
}

// A decision not newer than the newest applied or pending one changes nothing: the controller's
// resends, decisions reordered on the way, a source behind a resumed checkpoint's epoch.
TEST(ConfigSync, StaleAndDuplicateDecisionsAreDropped) {
  World w(3, adaptive(), ConfigWord{4, Topology::kRing, PinMode::kNone});  // resumed at epoch 4
  ScriptedSource src;
  src.script[1] = decision(3);  // behind the checkpoint
  src.script[2] = decision(5, Topology::kBcube);
  src.script[3] = decision(5, Topology::kBcube);         // resent: already applied
  src.script[4] = decision(5, Topology::kHierarchical);  // same epoch, other values
  src.script[5] = decision(4);
  src.script[6] = decision(6, Topology::kHalvingDoubling);
  src.script[7] = decision(kMaxSyncEpoch + 1);  // the word cannot carry it
  w.rank(0).addSource(src);
  for (uint64_t s = 0; s < 10; ++s) w.step(s, Clock::now());
  EXPECT_EQ(w.applied(0), (std::map<uint64_t, uint64_t>{{5, 3}, {6, 7}}));
  w.expectRanksAgree();
  EXPECT_EQ(w.rank(0).config(), (ConfigWord{6, Topology::kHalvingDoubling, PinMode::kCompact}));
  EXPECT_EQ(w.rank(0).staleDecisions(), 4u);
  EXPECT_EQ(w.rank(0).unencodableDecisions(), 1u);
  EXPECT_EQ(src.newest_seen[1], 4u);
  EXPECT_EQ(src.newest_seen[3], 5u);
}

// Two sources at one boundary: the later-polled newer decision wins, the older is never applied;
// the second source sees the first one's pending epoch.
TEST(ConfigSync, NewestPendingDecisionWins) {
  World w(2, adaptive());
  ScriptedSource first, second;
  first.script[2] = decision(1, Topology::kBcube);
  second.script[2] = decision(2, Topology::kHierarchical);
  w.rank(0).addSource(first);
  w.rank(0).addSource(second);
  for (uint64_t s = 0; s < 5; ++s) w.step(s, Clock::now());
  EXPECT_EQ(second.newest_seen[2], 1u);
  EXPECT_EQ(w.applied(0), (std::map<uint64_t, uint64_t>{{2, 3}}));
  EXPECT_EQ(w.rank(1).config().topology, Topology::kHierarchical);
}

// Broadcast boundaries and every bucket's tail collect; the sources are polled at each of them,
// and not at all in an --overhead-ab off block (collect = false), where no broadcast runs either.
TEST(ConfigSync, DecisionsAreCollectedAtEverySyncPointAndNotInOffBlocks) {
  World w(2, adaptive(Delivery::kBroadcast), {}, 3);
  ScriptedSource src;
  w.rank(0).addSource(src);
  for (uint64_t s = 0; s < 10; ++s) w.step(s, Clock::now(), 1.0, 0.5, /*collect=*/s < 5);
  for (uint64_t s = 0; s < 5; ++s) EXPECT_EQ(src.polls[s], 1 + 3) << "step " << s;
  for (uint64_t s = 5; s < 10; ++s) EXPECT_EQ(src.polls.count(s), 0u) << "step " << s;
  EXPECT_EQ(w.broadcasts(0), (std::vector<uint64_t>{0, 1, 2, 3, 4}));
}

// A UDP socket that sends frames to rank 0's control port on loopback.
struct ControlSender {
  explicit ControlSender(uint16_t port) : fd(socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0)) {
    to.sin_family = AF_INET;
    to.sin_port = htons(port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  }
  ~ControlSender() {
    if (fd >= 0) close(fd);
  }
  bool ok() const { return fd >= 0; }
  bool send(const std::vector<uint8_t>& d) const {
    return sendto(fd, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) ==
           ssize_t(d.size());
  }
  int fd;
  sockaddr_in to{};
};

// Rank 0 taking decisions from its control socket: a forged one is counted and dropped, the
// signed one reaches every rank at the same step, its replay changes nothing.
TEST(ReceiverSource, TakesVerifiedDecisionsFromTheControlSocket) {
  const std::string secret = "config-sync-test-secret";
  Verifier verifier("job", secret, 0);
  ControlReceiver receiver("127.0.0.1:0", verifier);
  uint64_t rejected = 0;
  std::vector<Decision> accepted;
  ReceiverSource source(
      receiver, verifier, [&](const Decision& d) { accepted.push_back(d); },
      [&](uint64_t n) { rejected += n; });
  World w(3, adaptive());
  w.rank(0).addSource(source);

  ControlSender sender(receiver.port());
  ASSERT_TRUE(sender.ok());
  auto send = [&](const std::vector<uint8_t>& d) { ASSERT_TRUE(sender.send(d)); };
  auto stepUntil = [&](uint64_t& s, auto done) {
    const auto deadline = Clock::now() + 10s;
    while (!done() && Clock::now() < deadline) w.step(s++, Clock::now());
    return done();
  };

  uint64_t s = 0;
  send(testing::signedDecision("job", 1, Topology::kBcube, PinMode::kNone, "forged"));
  send(testing::signedDecision("job", 1, Topology::kHalvingDoubling, PinMode::kCompact, secret));
  ASSERT_TRUE(stepUntil(s, [&] { return w.applied(2).count(1) == 1; }));
  w.expectRanksAgree();
  EXPECT_EQ(w.rank(1).config(), (ConfigWord{1, Topology::kHalvingDoubling, PinMode::kCompact}));
  EXPECT_EQ(rejected, 1u);
  ASSERT_EQ(accepted.size(), 1u);
  EXPECT_GT(accepted[0].arrival_ns, 0u);
  EXPECT_EQ(w.arrival(0, 1), accepted[0].arrival_ns);

  auto replay =
      testing::signedDecision("job", 1, Topology::kBcube, PinMode::kNuma, secret);  // stale epoch
  send(replay);
  ASSERT_TRUE(stepUntil(s, [&] { return verifier.rejected(Reject::kStaleEpoch) == 1; }));
  send(replay);  // the exact frame again
  ASSERT_TRUE(stepUntil(s, [&] { return verifier.rejected(Reject::kReplay) == 1; }));
  for (const uint64_t end = s + 5; s < end;) w.step(s++, Clock::now());
  EXPECT_EQ(w.applied(0).size(), 1u);
  EXPECT_EQ(rejected, 3u);
  EXPECT_EQ(accepted.size(), 1u);
  w.expectRanksAgree();
}

// A verified decision for a topology the transport cannot run (every transport runs every
// topology today; ibverbs once ran only the bound-buffer ones) would end the job at its first
// allreduce: rank 0 refuses it (counted, reported once), the job keeps its configuration, and the
// controller's next decision for a topology that runs is applied.
TEST(ReceiverSource, RefusesATopologyTheTransportCannotRun) {
  const std::string secret = "config-sync-test-secret";
  Verifier verifier("job", secret, 0);
  ControlReceiver receiver("127.0.0.1:0", verifier);
  uint64_t rejected = 0;
  std::vector<Decision> unsupported;
  const uint32_t bound =
      1u << uint32_t(Topology::kHalvingDoubling) | 1u << uint32_t(Topology::kBcube);
  ReceiverSource source(
      receiver, verifier, {}, [&](uint64_t n) { rejected += n; }, bound,
      [&](const Decision& d) { unsupported.push_back(d); });
  World w(2, adaptive());
  w.rank(0).addSource(source);
  ControlSender sender(receiver.port());
  ASSERT_TRUE(sender.ok());
  auto send = [&](const std::vector<uint8_t>& d) { ASSERT_TRUE(sender.send(d)); };
  uint64_t s = 0;
  auto stepUntil = [&](auto done) {
    const auto deadline = Clock::now() + 10s;
    while (!done() && Clock::now() < deadline) w.step(s++, Clock::now());
    return done();
  };
  const auto ring = testing::signedDecision("job", 1, Topology::kRing, PinMode::kCompact, secret);
  send(ring);
  ASSERT_TRUE(stepUntil([&] { return unsupported.size() == 1; }));
  send(ring);  // the controller re-sends until it sees the epoch applied: a replay now
  ASSERT_TRUE(stepUntil([&] { return verifier.rejected(Reject::kReplay) == 1; }));
  for (const uint64_t end = s + 5; s < end;) w.step(s++, Clock::now());
  EXPECT_EQ(unsupported.size(), 1u);
  EXPECT_EQ(unsupported[0].config.topology, Topology::kRing);
  EXPECT_EQ(rejected, 2u);
  EXPECT_TRUE(w.applied(0).empty());
  EXPECT_EQ(w.rank(1).config().topology, Topology::kRing);  // the initial configuration

  send(testing::signedDecision("job", 2, Topology::kBcube, PinMode::kNone, secret));
  ASSERT_TRUE(stepUntil([&] { return w.applied(1).count(2) == 1; }));
  EXPECT_EQ(w.rank(1).config(), (ConfigWord{2, Topology::kBcube, PinMode::kNone}));
  w.expectRanksAgree();
}

// A transport that runs only some topologies (here halving-doubling and bcube): draws never name
// another.
TEST(SwitchDraws, DrawOnlyTheTopologiesTheTransportRuns) {
  const uint32_t bound =
      1u << uint32_t(Topology::kHalvingDoubling) | 1u << uint32_t(Topology::kBcube);
  SwitchDraws all(1, 27), ibverbs(1, 27, bound);
  std::set<Topology> seen;
  for (uint64_t step = 1; step <= 200; ++step) {
    auto a = all.poll(step, 0), b = ibverbs.poll(step, 0);
    ASSERT_TRUE(a && b);
    EXPECT_TRUE(bound >> uint32_t(b->config.topology) & 1) << step;
    EXPECT_EQ(a->config.pinning, b->config.pinning);  // the pinning draw is the same
    if (bound >> uint32_t(a->config.topology) & 1) {
      EXPECT_EQ(a->config.topology, b->config.topology);
    }
    seen.insert(b->config.topology);
  }
  EXPECT_EQ(seen.size(), 2u);
}

}  // namespace
}  // namespace bpftrain::trainer::control
