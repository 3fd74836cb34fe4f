// The gradient allreduce in buckets (trainer/collective/gradient_buckets.h): the bucket plan, and
// over real communicators that bucket by bucket, with the topology switched between buckets, the
// gradients are the serial sum and bit-identical on every rank, and each bucket's tail carries
// rank 0's word while the floats it borrowed are summed as they were.
#include "trainer/collective/gradient_buckets.h"

#include <gtest/gtest.h>

#include <random>

#include "tests/trainer/collective/collective_test_util.h"

namespace bpftrain::trainer::collective {
namespace {

using namespace test_util;
constexpr size_t kTail = 8;

TEST(GradientBuckets, PlanCoversTheGradientsInOrderWithAMinimumBucket) {
  const size_t min = GradientBuckets::kMinBucketFloats;
  struct Case {
    size_t gradients;
    int wanted;
    size_t expect;
  } cases[] = {
      {9'610, 4, 1},        // the digits model: one bucket
      {min - 1, 8, 1},      // too few for two
      {2 * min, 4, 2},      // capped by the minimum
      {16'785'418, 4, 4},   // mlp:2048x4, the netlab model
      {16'785'418, 1, 1},   // --allreduce-buckets 1
      {8 * min + 3, 8, 8},  // an odd tail end
      {300'000, 0, 1},      // nonsense asks for one
  };
  for (const Case& c : cases) {
    GradientBuckets b(c.gradients, kTail, c.wanted);
    ASSERT_EQ(b.size(), c.expect) << c.gradients << " floats, " << c.wanted << " wanted";
    EXPECT_EQ(b.begin(0), 0u);
    EXPECT_EQ(b.end(b.size() - 1), c.gradients);
    for (size_t i = 0; i < b.size(); ++i) {
      EXPECT_GE(b.end(i) - b.begin(i), b.size() > 1 ? kTail : 1u) << "bucket " << i;
      if (i + 1 < b.size()) {
        EXPECT_EQ(b.end(i), b.begin(i + 1));
        EXPECT_EQ(b.end(i) % GradientBuckets::kAlignFloats, 0u);
      }
    }
  }
}

// Four ranks, buckets of one gradient buffer each run on another topology (as a mid-step switch
// does): exact sums with small integers, bit-identical ranks with random floats, and each bucket's
// tail read back as rank 0's values on every rank.
TEST(GradientBuckets, BucketsSwitchingTopologiesSumLikeOneAllreduce) {
  constexpr int kWorld = 4;
  const size_t gradients = 4 * GradientBuckets::kMinBucketFloats + 4099;
  for (bool random : {false, true}) {
    SCOPED_TRACE(random ? "random floats" : "small integers");
    std::vector<uint64_t> hashes(kWorld);
    std::vector<std::vector<float>> tails(kWorld);
    std::vector<std::vector<float>> results(kWorld);
    runRanks(kWorld, [&](int rank, Communicator& comm) {
      std::mt19937 gen(uint32_t(rank + 1));
      std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
      std::vector<float> buffer(gradients + kTail, -1.0f);
      for (size_t i = 0; i < gradients; ++i) buffer[i] = random ? dist(gen) : intValue(rank, i, 5);
      GradientBuckets buckets(gradients, kTail, 4);
      ASSERT_EQ(buckets.size(), 4u);
      for (size_t b = 0; b < buckets.size(); ++b) {
        buckets.run(
            buffer, b,
            [&](std::span<float> tail) {
              ASSERT_EQ(tail.size(), kTail);
              for (size_t i = 0; i < kTail; ++i) tail[i] = rank == 0 ? float(100 * b + i) : 0.0f;
            },
            [&](std::span<float> data) { comm.allreduce(data, kAll[b % std::size(kAll)]); },
            [&](std::span<const float> tail) {
              tails[size_t(rank)].insert(tails[size_t(rank)].end(), tail.begin(), tail.end());
            });
      }
      hashes[size_t(rank)] = hashOf(std::span<const float>(buffer).first(gradients));
      results[size_t(rank)] = std::move(buffer);
    });
    for (int r = 1; r < kWorld; ++r) {
      EXPECT_EQ(hashes[size_t(r)], hashes[0]) << "rank " << r;
      EXPECT_EQ(tails[size_t(r)], tails[0]) << "rank " << r;
    }
    for (size_t b = 0; b < 4; ++b)
      for (size_t i = 0; i < kTail; ++i)
        EXPECT_EQ(tails[0][b * kTail + i], float(100 * b + i)) << "bucket " << b << " float " << i;
    if (random) continue;
    size_t bad = 0;
    for (size_t i = 0; i < gradients; ++i) {
      float want = 0;
      for (int r = 0; r < kWorld; ++r) want += intValue(r, i, 5);
      bad += results[0][i] != want;
    }
    EXPECT_EQ(bad, 0u) << "gradients that are not the serial sum (the lent floats among them?)";
  }
}

}  // namespace
}  // namespace bpftrain::trainer::collective
