#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tests/support/requirements.h"
#include "tests/support/temp_dir.h"
#include "trainer/model/checkpoint.h"
#include "trainer/model/dataset.h"
#include "trainer/model/huge_buffer.h"
#include "trainer/model/mlp.h"

namespace bpftrain::trainer::model {
namespace {

namespace fs = std::filesystem;

class TempDir : public bpftrain::testing::TempDir {
 public:
  TempDir() : bpftrain::testing::TempDir("bpftrain-model-test") {}
};

TEST(HugeBuffer, AlignedZeroedAndHashable) {
  HugeBuffer b(1000, true);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kHugePageSize, 0u);
  EXPECT_EQ(b.regionBytes(), kHugePageSize);
  for (float v : b.span()) ASSERT_EQ(v, 0.0f);
  uint64_t h0 = hashFloats(b.span());
  b.data()[999] = 1.0f;
  EXPECT_NE(hashFloats(b.span()), h0);
  HugeBuffer moved = std::move(b);
  EXPECT_EQ(moved.size(), 1000u);
  EXPECT_EQ(b.data(), nullptr);
}

TEST(HugeBuffer, AdvisedBufferGetsHugePagesWhenThpAllows) {
  std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode((std::istreambuf_iterator<char>(thp)), {});
  if (mode.find("[never]") != std::string::npos)
    BPFTRAIN_SKIP_OR_FAIL_UNDER_CI("THP is disabled on this kernel");
  int64_t before = anonHugePagesBytes();
  ASSERT_GE(before, 0);
  HugeBuffer b(8 * kHugePageSize / sizeof(float), true);
  ASSERT_TRUE(b.hugepageAdvised());
  for (size_t i = 0; i < b.size(); i += 1024) b.data()[i] = 1.0f;
  // Faults in an advised, aligned region are served with huge pages when memory allows.
  EXPECT_GT(anonHugePagesBytes(), before);
}

// The warm-up's log line reports its resident-set growth with this: touching 32 MiB grows it by
// about that much.
TEST(HugeBuffer, ResidentBytesGrowWithTouchedMemory) {
  const int64_t before = residentBytes();
  ASSERT_GT(before, 0);
  HugeBuffer b(32 * 1024 * 1024 / sizeof(float), false);
  for (size_t i = 0; i < b.size(); i += 1024) b.data()[i] = 1.0f;
  const int64_t grown = residentBytes() - before;
  EXPECT_GE(grown, 28 * 1024 * 1024);
  EXPECT_LE(grown, 64 * 1024 * 1024);
}

TEST(ModelSpec, ParsesAndRejects) {
  ModelSpec s;
  std::string err;
  ASSERT_TRUE(parseModelSpec("digits", s, err));
  EXPECT_EQ(s.width, 128);
  ASSERT_TRUE(parseModelSpec("mlp:4096x2", s, err));
  EXPECT_EQ(s.width, 4096);
  EXPECT_EQ(s.depth, 2);
  for (const char* bad : {"mlp:", "mlp:10", "mlp:0x1", "mlp:10x0", "mlp:10x2z", "resnet"}) {
    EXPECT_FALSE(parseModelSpec(bad, s, err)) << bad;
    EXPECT_NE(err.find("mlp:WIDTHxDEPTH"), std::string::npos);
  }
}

TEST(Dataset, MissingFileNamesSetup) {
  try {
    loadDigits("/nonexistent/digits.csv.gz");
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("tools/setup"), std::string::npos);
  }
}

TEST(Dataset, LoadsDigitsAndSplitsDeterministically) {
  Dataset all = loadDigits(defaultDigitsPath());
  ASSERT_EQ(all.rows(), 1797u);
  Split a = splitDataset(all, 0.2, 7), b = splitDataset(all, 0.2, 7);
  EXPECT_EQ(a.test.rows(), 359u);
  EXPECT_EQ(a.train.rows() + a.test.rows(), all.rows());
  EXPECT_EQ(a.test.y, b.test.y);
  EXPECT_EQ(a.train.x, b.train.x);
}

TEST(Sharder, DisjointShardsAndPureBatches) {
  Sharder r0(100, 0, 3, 8, 1), r1(100, 1, 3, 8, 1), again(100, 0, 3, 8, 1);
  EXPECT_EQ(r0.shardSize() + r1.shardSize() + Sharder(100, 2, 3, 8, 1).shardSize(), 100u);
  for (uint32_t i : r0.batchFor(5)) EXPECT_EQ(i % 3, 0u);
  for (uint32_t i : r1.batchFor(5)) EXPECT_EQ(i % 3, 1u);
  std::vector<uint32_t> late(again.batchFor(41).begin(), again.batchFor(41).end());
  for (uint64_t s = 0; s <= 41; ++s) r0.batchFor(s);
  std::vector<uint32_t> seq(r0.batchFor(41).begin(), r0.batchFor(41).end());
  EXPECT_EQ(late, seq);  // what a resumed run sees
}

TEST(Mlp, GradientMatchesFiniteDifference) {
  Dataset all = loadDigits(defaultDigitsPath());
  ModelSpec spec;
  std::string err;
  ASSERT_TRUE(parseModelSpec("mlp:16x2", spec, err));
  Mlp m(spec, 8, false);
  m.initialize(3);
  std::vector<uint32_t> rows{0, 1, 2, 3, 4, 5, 6, 7};
  m.computeGradients(all, rows);
  std::vector<float> g(m.gradients().begin(), m.gradients().end());
  for (size_t i : {size_t{0}, size_t{100}, size_t{64 * 16 + 3}, m.parameterCount() - 1}) {
    float& p = m.parameters()[i];
    float keep = p;
    const float h = 1e-2f;
    p = keep + h;
    double lp = m.computeGradients(all, rows);
    p = keep - h;
    double lm = m.computeGradients(all, rows);
    p = keep;
    EXPECT_NEAR((lp - lm) / (2 * h), g[i], 2e-3) << "parameter " << i;
  }
}

TEST(Mlp, DefaultModelLearnsDigits) {
  useSingleThreadedBlas();
  Split s = splitDataset(loadDigits(defaultDigitsPath()), 0.2, 1);
  ModelSpec spec;
  Mlp m(spec, 64, true);
  m.initialize(1);
  Sharder sh(s.train.rows(), 0, 1, 64, 1);
  for (uint64_t step = 0; step < 600; ++step) {
    m.computeGradients(s.train, sh.batchFor(step));
    m.applyGradients(0.05f, 0.9f, 1.0f);
  }
  EXPECT_GE(m.accuracy(s.test), 0.95);
}

TEST(Checkpoint, RoundTripAndSkipsCorruptAndTorn) {
  TempDir dir;
  std::vector<float> p(1000), v(1000);
  for (int step : {10, 20, 30}) {
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] = float(step) + float(i);
      v[i] = -float(i);
    }
    CheckpointState st{uint64_t(step), 2, 1, 3, 42, "digits"};
    writeCheckpoint(dir.path(), st, p, v, 3);
  }
  std::vector<float> lp(1000), lv(1000);
  auto st = loadNewestCheckpoint(dir.path(), lp, lv);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->step, 30u);
  EXPECT_EQ(st->config_epoch, 2u);
  EXPECT_EQ(st->topology, 1);
  EXPECT_EQ(st->pinning, 3);
  EXPECT_EQ(st->model, "digits");
  EXPECT_EQ(lp[5], 35.0f);
  // Flip one payload byte of the newest: CRC catches it and step 20 is used.
  {
    std::fstream f(checkpointPath(dir.path(), 30), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    f.put('\x7f');
  }
  st = loadNewestCheckpoint(dir.path(), lp, lv);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->step, 20u);
  EXPECT_EQ(lp[5], 25.0f);
  // Tear step 20 (a crash mid-write of a filesystem without rename atomicity).
  ASSERT_EQ(truncate(checkpointPath(dir.path(), 20).c_str(), 1000), 0);
  st = loadNewestCheckpoint(dir.path(), lp, lv);
  ASSERT_TRUE(st);
  EXPECT_EQ(st->step, 10u);
  // Wrong model size is refused, not misread.
  std::vector<float> small(10), smallv(10);
  EXPECT_FALSE(loadNewestCheckpoint(dir.path(), small, smallv));
}

TEST(Checkpoint, KeepsNewestAndIgnoresTempFiles) {
  TempDir dir;
  std::vector<float> p(10), v(10);
  for (int step = 1; step <= 5; ++step) {
    CheckpointState st;
    st.step = uint64_t(step);
    writeCheckpoint(dir.path(), st, p, v, 2);
  }
  std::ofstream(dir.path() + "/ckpt-00000000000000000009.bin.tmp") << "torn";
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir.path())) files += e.path().extension() == ".bin";
  EXPECT_EQ(files, 2u);
  std::vector<float> lp(10), lv(10);
  EXPECT_EQ(loadNewestCheckpoint(dir.path(), lp, lv)->step, 5u);
}

}  // namespace
}  // namespace bpftrain::trainer::model
