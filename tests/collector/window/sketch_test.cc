#include "collector/window/sketch.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace bpftrain::collector::window {
namespace {

constexpr double kQuantiles[] = {0, 0.001, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1};

double exactQuantile(const std::vector<double>& sorted, double q) {
  return sorted[size_t(std::floor(q * double(sorted.size() - 1)))];
}

// Every quantile within the relative error of the exact sample quantile (plus float rounding).
void expectWithinBound(const Sketch& sketch, std::vector<double> values, const std::string& what) {
  std::sort(values.begin(), values.end());
  ASSERT_EQ(sketch.count(), values.size()) << what;
  for (double q : kQuantiles) {
    double exact = exactQuantile(values, q);
    double got = sketch.quantile(q);
    EXPECT_LE(std::abs(got - exact), sketch.relativeError() * std::abs(exact) * (1 + 1e-9))
        << what << " q=" << q << " exact=" << exact << " got=" << got;
  }
}

struct Distribution {
  std::string name;
  std::function<double(std::mt19937_64&)> draw;
};

std::vector<Distribution> distributions() {
  return {
      {"uniform", [](std::mt19937_64& r) { return std::uniform_real_distribution<>(0, 1000)(r); }},
      {"lognormal", [](std::mt19937_64& r) { return std::lognormal_distribution<>(0, 2)(r); }},
      {"bimodal",
       [](std::mt19937_64& r) {
         return std::bernoulli_distribution(0.7)(r) ? std::normal_distribution<>(10, 1)(r)
                                                    : std::normal_distribution<>(10000, 500)(r);
       }},
      {"tiny", [](std::mt19937_64& r) { return std::lognormal_distribution<>(-25, 1.5)(r); }},
      {"huge", [](std::mt19937_64& r) { return std::lognormal_distribution<>(60, 3)(r); }},
      {"signed_with_zeros",
       [](std::mt19937_64& r) {
         return std::bernoulli_distribution(0.1)(r) ? 0.0 : std::normal_distribution<>(0, 100)(r);
       }},
      {"negative_lognormal",
       [](std::mt19937_64& r) { return -std::lognormal_distribution<>(3, 1)(r); }},
  };
}

TEST(Sketch, QuantilesWithinOnePercentOnSeveralDistributions) {
  for (const Distribution& d : distributions()) {
    std::mt19937_64 rng(42);
    Sketch sketch;
    std::vector<double> values;
    for (int i = 0; i < 100'000; ++i) {
      values.push_back(d.draw(rng));
      ASSERT_TRUE(sketch.add(values.back()));
    }
    EXPECT_FALSE(sketch.collapsed()) << d.name;
    expectWithinBound(sketch, values, d.name);
  }
}

TEST(Sketch, SmallSamplesAndSingleValue) {
  Sketch sketch;
  EXPECT_TRUE(std::isnan(sketch.quantile(0.5)));
  sketch.add(42);
  for (double q : kQuantiles) EXPECT_NEAR(sketch.quantile(q), 42, 0.42);
  sketch.add(-1);
  sketch.add(0);
  EXPECT_NEAR(sketch.quantile(0), -1, 0.01);
  EXPECT_EQ(sketch.quantile(0.5), 0);
  EXPECT_NEAR(sketch.quantile(1), 42, 0.42);
}

TEST(Sketch, RejectsNonFinite) {
  Sketch sketch;
  EXPECT_FALSE(sketch.add(std::numeric_limits<double>::quiet_NaN()));
  EXPECT_FALSE(sketch.add(std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(sketch.add(-std::numeric_limits<double>::infinity()));
  EXPECT_EQ(sketch.count(), 0u);
  EXPECT_TRUE(sketch.add(std::numeric_limits<double>::max()));
  EXPECT_TRUE(sketch.add(-std::numeric_limits<double>::max()));
  EXPECT_TRUE(sketch.add(std::numeric_limits<double>::denorm_min()));
  EXPECT_EQ(sketch.count(), 3u);
  EXPECT_TRUE(std::isfinite(sketch.quantile(1)));
  EXPECT_TRUE(std::isfinite(sketch.quantile(0)));
}

TEST(Sketch, MergeEqualsSketchOfUnion) {
  for (const Distribution& d : distributions()) {
    std::mt19937_64 rng(7);
    Sketch a, b, all;
    std::vector<double> values;
    for (int i = 0; i < 20'000; ++i) {
      double v = d.draw(rng);
      values.push_back(v);
      (i % 3 == 0 ? a : b).add(v);
      all.add(v);
    }
    Sketch merged;
    ASSERT_TRUE(merged.merge(a));
    ASSERT_TRUE(merged.merge(b));
    EXPECT_TRUE(merged.sameBins(all)) << d.name;
    for (double q : kQuantiles) EXPECT_EQ(merged.quantile(q), all.quantile(q)) << d.name << q;
    expectWithinBound(merged, values, d.name + " merged");
  }
}

TEST(Sketch, MergeRefusesADifferentMapping) {
  Sketch a(0.01), b(0.02);
  b.add(1);
  EXPECT_FALSE(a.merge(b));
  EXPECT_EQ(a.count(), 0u);
}

TEST(Sketch, CollapsesLowestBinsAndKeepsTheHighQuantiles) {
  Sketch sketch(0.01, 128);  // 128 bins span a factor of ~13 at 1%
  std::vector<double> values;
  std::mt19937_64 rng(3);
  for (int i = 0; i < 10'000; ++i) {
    values.push_back(std::uniform_real_distribution<>(1, 1000)(rng));
    sketch.add(values.back());
  }
  EXPECT_TRUE(sketch.collapsed());
  EXPECT_EQ(sketch.count(), values.size());
  std::sort(values.begin(), values.end());
  for (double q : {0.95, 0.99, 1.0}) {
    double exact = exactQuantile(values, q);
    EXPECT_LE(std::abs(sketch.quantile(q) - exact), 0.01 * exact * (1 + 1e-9)) << q;
  }
  // The folded mass sits at the lowest kept bin, never above the true low quantiles' bins.
  EXPECT_LE(sketch.quantile(0), exactQuantile(values, 0.95));

  // Merging collapsed sketches keeps every count.
  Sketch other(0.01, 128);
  for (int i = 0; i < 100; ++i) other.add(1e6 + i);
  ASSERT_TRUE(sketch.merge(other));
  EXPECT_EQ(sketch.count(), values.size() + 100);
  EXPECT_NEAR(sketch.quantile(1), 1e6 + 99, 0.01 * 1e6);
}

TEST(Sketch, ClearKeepsCapacitySoReuseDoesNotAllocate) {
  Sketch sketch;
  std::mt19937_64 rng(5);
  std::lognormal_distribution<> dist(0, 1);
  std::vector<double> values;
  for (int i = 0; i < 5000; ++i) values.push_back(dist(rng));
  for (double v : values) sketch.add(v);
  size_t sized = sketch.memoryBytes();
  EXPECT_GT(sized, 0u);
  for (int round = 0; round < 3; ++round) {
    sketch.clear();
    EXPECT_EQ(sketch.count(), 0u);
    for (double v : values) sketch.add(v);
    EXPECT_EQ(sketch.memoryBytes(), sized);
  }
}

TEST(Sketch, SerializeRoundTripIsExactAndCompact) {
  for (const Distribution& d : distributions()) {
    std::mt19937_64 rng(11);
    Sketch sketch;
    for (int i = 0; i < 10'000; ++i) sketch.add(d.draw(rng));
    std::vector<uint8_t> buf(sketch.serializedSize());
    ASSERT_EQ(sketch.serialize(buf), buf.size()) << d.name;
    EXPECT_EQ(sketch.serialize(std::span<uint8_t>(buf.data(), buf.size() - 1)), 0u);
    Sketch back;
    ASSERT_TRUE(back.deserialize(buf)) << d.name;
    EXPECT_TRUE(back.sameBins(sketch)) << d.name;
    // Compact: a small index delta and a count below 2^14 take at most three bytes a bin.
    EXPECT_LE(buf.size(), 3 * sketch.binCount() + 16) << d.name;
  }
  Sketch empty;
  std::vector<uint8_t> buf(empty.serializedSize());
  ASSERT_EQ(empty.serialize(buf), buf.size());
  Sketch back;
  back.add(3);
  ASSERT_TRUE(back.deserialize(buf));
  EXPECT_EQ(back.count(), 0u);
}

TEST(Sketch, CorruptSerializedInputIsRejectedWithoutCrashing) {
  Sketch sketch;
  std::mt19937_64 rng(13);
  for (int i = 0; i < 2000; ++i) sketch.add(std::normal_distribution<>(0, 50)(rng));
  std::vector<uint8_t> good(sketch.serializedSize());
  sketch.serialize(good);

  Sketch back;
  // Every truncation is rejected and leaves the sketch empty.
  for (size_t n = 0; n < good.size(); ++n) {
    EXPECT_FALSE(back.deserialize(std::span<const uint8_t>(good.data(), n))) << n;
    EXPECT_EQ(back.count(), 0u);
  }
  // Trailing bytes, another format version, another relative error.
  std::vector<uint8_t> bad = good;
  bad.push_back(0);
  EXPECT_FALSE(back.deserialize(bad));
  bad = good;
  bad[0] = 2;
  EXPECT_FALSE(back.deserialize(bad));
  EXPECT_FALSE(Sketch(0.02).deserialize(good));
  // A bin count far larger than the bytes that follow.
  const uint8_t huge_bins[] = {1, 0x7b, 0x14, 0xae, 0x47, 0xe1, 0x7a, 0x84, 0x3f,
                               0, 0xff, 0xff, 0xff, 0xff, 0x0f, 2,    1};
  EXPECT_FALSE(back.deserialize(huge_bins));
  // Random mutations: rejected, or accepted as a consistent sketch; never a crash.
  std::uniform_int_distribution<size_t> pos(0, good.size() - 1);
  std::uniform_int_distribution<int> byte(0, 255);
  for (int i = 0; i < 20'000; ++i) {
    bad = good;
    for (int k = 0; k < 1 + i % 4; ++k) bad[pos(rng)] = uint8_t(byte(rng));
    if (back.deserialize(bad)) {
      EXPECT_GT(back.count(), 0u);
      EXPECT_FALSE(std::isnan(back.quantile(0.5)));
    } else {
      EXPECT_EQ(back.count(), 0u);
    }
  }
  // Random garbage.
  for (int i = 0; i < 20'000; ++i) {
    std::vector<uint8_t> junk(size_t(byte(rng)) % 64);
    for (auto& b : junk) b = uint8_t(byte(rng));
    if (!junk.empty() && i % 2) junk[0] = 1;
    back.deserialize(junk);
  }
}

}  // namespace
}  // namespace bpftrain::collector::window
