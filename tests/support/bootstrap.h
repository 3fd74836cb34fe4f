// A median and a bootstrap 95% interval of it, for benchmarks that compare blocks of interleaved
// segments (the probes' and the traps' costs): a median resists the preempted block a shared host
// throws in, and the interval says whether a difference is resolved at all.
#pragma once

#include <algorithm>
#include <random>
#include <vector>

namespace bpftrain::testing {

struct Interval {
  double median = 0, lo = 0, hi = 0;
};

// The median of `v` (the mean of the middle two for an even count); 0 for none.
inline double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// The median of `v` and a bootstrap 95% interval of it (2000 resamples, percentile method).
inline Interval bootstrapMedian(const std::vector<double>& v, std::mt19937_64& rng) {
  if (v.empty()) return {};
  std::uniform_int_distribution<size_t> pick(0, v.size() - 1);
  std::vector<double> medians, sample(v.size());
  for (int r = 0; r < 2000; ++r) {
    for (double& x : sample) x = v[pick(rng)];
    medians.push_back(median(sample));
  }
  std::sort(medians.begin(), medians.end());
  return {median(v), medians[50], medians[1949]};
}

}  // namespace bpftrain::testing
