// The handwritten digits set (sklearn's digits.csv.gz: 1797 rows of 64 pixels 0..16 and a label),
// split into train and held-out test sets with a fixed seed, and sharded across ranks.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace bpftrain::trainer::model {

struct Dataset {
  int features = 0;
  int classes = 0;
  std::vector<float> x;  // rows × features, scaled to [0, 1]
  std::vector<int> y;    // rows
  size_t rows() const { return y.size(); }
  const float* row(size_t i) const { return x.data() + i * size_t(features); }
};

// Where the data file is looked for when --data is not given: $BPFTRAIN_DATA, the source tree's
// data/ (tools/setup puts it there), then the installed share directory.
std::string defaultDigitsPath();

// Throws std::runtime_error naming tools/setup when the file is missing, and the line when
// malformed.
Dataset loadDigits(const std::string& path);

struct Split {
  Dataset train;
  Dataset test;
};
// Shuffles with `seed` and holds out `test_fraction` of the rows; the same on every rank.
Split splitDataset(const Dataset& all, double test_fraction, uint64_t seed);

// The rank's shard of the training rows and the batch for each step. batchFor(step) is a pure
// function of (seed, rank, step), so a resumed run sees exactly the batches of an uninterrupted
// one.
class Sharder {
 public:
  Sharder(size_t train_rows, int rank, int world, int batch, uint64_t seed);
  // Row indices (into the training set) of the step's batch; valid until the next call.
  std::span<const uint32_t> batchFor(uint64_t step);
  size_t shardSize() const { return shard_.size(); }

 private:
  void shuffleEpoch(uint64_t epoch);
  std::vector<uint32_t> shard_;
  std::vector<uint32_t> order_;
  std::vector<uint32_t> batch_;
  int rank_;
  uint64_t seed_;
  uint64_t epoch_ = ~uint64_t{0};
};

}  // namespace bpftrain::trainer::model
