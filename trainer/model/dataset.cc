#include "trainer/model/dataset.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstdlib>
#include <numeric>
#include <random>
#include <stdexcept>

#ifndef BPFTRAIN_SOURCE_DATA_DIR
#define BPFTRAIN_SOURCE_DATA_DIR "data"
#endif
#ifndef BPFTRAIN_INSTALL_DATA_DIR
#define BPFTRAIN_INSTALL_DATA_DIR "/usr/share/bpftrain"
#endif

namespace bpftrain::trainer::model {
namespace {

bool fileExists(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// splitmix64: the seed mixer for per-rank, per-epoch shuffles (stable across libstdc++ versions
// because we shuffle with our own Fisher-Yates below).
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <typename T>
void shuffle(std::vector<T>& v, uint64_t seed) {
  uint64_t state = seed;
  for (size_t i = v.size(); i > 1; --i) {
    state = mix(state);
    std::swap(v[i - 1], v[state % i]);
  }
}

}  // namespace

std::string defaultDigitsPath() {
  if (const char* env = std::getenv("BPFTRAIN_DATA"); env != nullptr && *env != '\0') return env;
  std::string source = std::string(BPFTRAIN_SOURCE_DATA_DIR) + "/digits.csv.gz";
  if (fileExists(source)) return source;
  return std::string(BPFTRAIN_INSTALL_DATA_DIR) + "/digits.csv.gz";
}

Dataset loadDigits(const std::string& path) {
  if (!fileExists(path))
    throw std::runtime_error("data file " + path +
                             " not found: run tools/setup (it extracts digits.csv.gz from Debian's "
                             "python3-sklearn), or pass --data FILE / set BPFTRAIN_DATA");
  gzFile f = gzopen(path.c_str(), "rb");
  if (f == nullptr) throw std::runtime_error("cannot open " + path + ": run tools/setup");
  Dataset d;
  d.features = 64;
  d.classes = 10;
  char buf[4096];
  size_t line_no = 0;
  while (gzgets(f, buf, sizeof(buf)) != nullptr) {
    ++line_no;
    std::string_view s(buf);
    while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.remove_suffix(1);
    if (s.empty()) continue;
    int values[65];
    int n = 0;
    size_t pos = 0;
    bool ok = true;
    while (pos <= s.size() && n < 66) {
      size_t comma = s.find(',', pos);
      if (comma == std::string_view::npos) comma = s.size();
      std::string field(s.substr(pos, comma - pos));
      char* end = nullptr;
      double v = std::strtod(field.c_str(), &end);
      if (field.empty() || end == nullptr || *end != '\0' || n >= 65) {
        ok = false;
        break;
      }
      values[n++] = int(v);
      pos = comma + 1;
    }
    if (!ok || n != 65 || values[64] < 0 || values[64] > 9) {
      gzclose(f);
      throw std::runtime_error(path + ":" + std::to_string(line_no) +
                               ": expected 64 pixel values and a label 0..9: run tools/setup to "
                               "extract a fresh copy");
    }
    for (int i = 0; i < 64; ++i) d.x.push_back(float(values[i]) / 16.0f);
    d.y.push_back(values[64]);
  }
  gzclose(f);
  if (d.rows() == 0) throw std::runtime_error(path + " holds no rows: run tools/setup");
  return d;
}

Split splitDataset(const Dataset& all, double test_fraction, uint64_t seed) {
  std::vector<uint32_t> idx(all.rows());
  std::iota(idx.begin(), idx.end(), 0u);
  shuffle(idx, mix(seed ^ 0x5EED5EEDull));
  size_t test_rows = size_t(double(all.rows()) * test_fraction);
  Split s;
  for (Dataset* d : {&s.train, &s.test}) {
    d->features = all.features;
    d->classes = all.classes;
  }
  for (size_t i = 0; i < idx.size(); ++i) {
    Dataset& d = i < test_rows ? s.test : s.train;
    const float* r = all.row(idx[i]);
    d.x.insert(d.x.end(), r, r + all.features);
    d.y.push_back(all.y[idx[i]]);
  }
  return s;
}

Sharder::Sharder(size_t train_rows, int rank, int world, int batch, uint64_t seed)
    : rank_(rank), seed_(seed) {
  for (size_t i = size_t(rank); i < train_rows; i += size_t(world)) shard_.push_back(uint32_t(i));
  if (shard_.empty())
    throw std::runtime_error("rank " + std::to_string(rank) + " of " + std::to_string(world) +
                             " has no training rows: use fewer ranks");
  order_ = shard_;
  batch_.resize(size_t(batch));
}

void Sharder::shuffleEpoch(uint64_t epoch) {
  order_ = shard_;  // same size: no reallocation
  shuffle(order_, mix(seed_ ^ mix(uint64_t(rank_) + 1) ^ mix(epoch + 0x1000)));
  epoch_ = epoch;
}

std::span<const uint32_t> Sharder::batchFor(uint64_t step) {
  const uint64_t n = shard_.size();
  for (size_t i = 0; i < batch_.size(); ++i) {
    uint64_t pos = step * batch_.size() + i;
    uint64_t epoch = pos / n;
    if (epoch != epoch_) shuffleEpoch(epoch);
    batch_[i] = order_[pos % n];
  }
  return batch_;
}

}  // namespace bpftrain::trainer::model
