// End-to-end runs of bpftrain-train: accuracy, bit-identical ranks across live switches,
// checkpoint + resume, the launcher's failure handling, telemetry, signed control, bad input.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <regex>
#include <set>
#include <sstream>

#include "common/training_config.h"
#include "common/wire_format.h"
#include "tests/support/child_process.h"
#include "tests/support/loopback.h"
#include "tests/support/requirements.h"
#include "tests/support/signed_control.h"
#include "tests/support/temp_dir.h"

namespace bpftrain::trainer {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;
using testing::signedDecision;
namespace fs = std::filesystem;

const std::string kTrain = BPFTRAIN_TRAIN_BINARY;
using bpftrain::PinMode;
using bpftrain::Topology;

class TempDir : public testing::TempDir {
 public:
  TempDir() : testing::TempDir("bpftrain-e2e") {}
};

std::vector<std::string> cmd(std::vector<std::string> args) {
  args.insert(args.begin(), kTrain);
  return args;
}

// rank -> params hash from the "final ..." lines.
std::map<int, std::string> finalHashes(const std::string& out) {
  std::map<int, std::string> h;
  std::regex re(R"(rank (\d+): final step \d+ .* params_hash (0x[0-9a-f]+))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    h[std::stoi((*it)[1])] = (*it)[2];
  return h;
}

double finalAccuracy(const std::string& out) {
  std::smatch m;
  std::regex re(R"(rank 0: final step \d+ loss [0-9.]+ test_accuracy ([0-9.]+))");
  return std::regex_search(out, m, re) ? std::stod(m[1]) : -1;
}

// rank -> (epoch -> step) from "applied epoch E at step S" lines.
std::map<int, std::map<uint64_t, uint64_t>> appliedSteps(const std::string& out) {
  std::map<int, std::map<uint64_t, uint64_t>> a;
  std::regex re(R"(rank (\d+): applied epoch (\d+) at step (\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    a[std::stoi((*it)[1])][std::stoull((*it)[2])] = std::stoull((*it)[3]);
  return a;
}

TEST(TrainE2E, DefaultRunReachesTestAccuracy) {
  ChildProcess p(cmd({"--collector", "none"}));
  ASSERT_EQ(p.exitCode(60s), 0) << p.err;
  EXPECT_GE(finalAccuracy(p.out), 0.95) << p.out;
}

class SwitchPath : public ::testing::TestWithParam<std::string> {};
INSTANTIATE_TEST_SUITE_P(TrainE2E, SwitchPath, ::testing::Values("tail", "broadcast"));

// Through both ways a config word reaches the ranks: the allreduce tail and the broadcast.
TEST_P(SwitchPath, RanksStayBitIdenticalAcrossRandomTopologyAndPinningSwitches) {
  ChildProcess p(cmd({"--ranks", "4", "--steps", "200", "--switch-every", "5", "--switch-seed",
                      "11", "--node-of", "0,0,1,1", "--collector", "none", "--sync", GetParam()}));
  ASSERT_EQ(p.exitCode(90s), 0) << p.err;
  auto hashes = finalHashes(p.out);
  ASSERT_EQ(hashes.size(), 4u) << p.out;
  for (auto& [rank, h] : hashes) EXPECT_EQ(h, hashes[0]) << "rank " << rank;
  auto applied = appliedSteps(p.out);
  ASSERT_EQ(applied.size(), 4u);
  EXPECT_EQ(applied[0].size(), 39u);  // a switch every 5 steps from step 5 to 195
  std::set<std::string> topologies;
  std::regex re(R"(rank 0: applied epoch \d+ at step \d+: topology (\S+) pinning (\S+))");
  for (std::sregex_iterator it(p.out.begin(), p.out.end(), re), end; it != end; ++it)
    topologies.insert((*it)[1]);
  EXPECT_EQ(topologies.size(), 4u) << "all four topologies should have been drawn";
  // Every rank applied every epoch at the same step.
  for (int r = 1; r < 4; ++r) EXPECT_EQ(applied[r], applied[0]) << "rank " << r;
}

// The gradient allreduce in 4 buckets (a model of 300k parameters): a drawn topology with the
// same pinning applies inside the step, after the first bucket, on every rank at the same bucket;
// one that changes pinning at the next step. Parameters stay bit-identical across ranks.
TEST(TrainE2E, MidStepTopologySwitchesAtABucketBoundaryKeepRanksBitIdentical) {
  ChildProcess p(cmd({"--ranks",
                      "4",
                      "--steps",
                      "80",
                      "--model",
                      "mlp:512x2",
                      "--switch-every",
                      "4",
                      "--switch-seed",
                      "3",
                      "--node-of",
                      "0,0,1,1",
                      "--collector",
                      "none",
                      "--sync",
                      "tail",
                      "--allreduce-buckets",
                      "4",
                      "--eval-every",
                      "0"}));
  ASSERT_EQ(p.exitCode(90s), 0) << p.err;
  EXPECT_NE(p.out.find("allreduce in 4 buckets"), std::string::npos) << p.out;
  auto hashes = finalHashes(p.out);
  ASSERT_EQ(hashes.size(), 4u) << p.out;
  for (auto& [rank, h] : hashes) EXPECT_EQ(h, hashes[0]) << "rank " << rank;
  // rank -> epoch -> (step, bucket), and how many switches changed pinning.
  std::map<int, std::map<uint64_t, std::pair<uint64_t, int>>> at;
  std::map<std::string, int> kinds;
  std::string pinning = "none";
  std::regex re(
      R"(rank (\d+): applied epoch (\d+) at step (\d+): topology \S+ pinning (\S+) at \d+ ns)"
      R"((?: \(arrived \d+ ns\))?( mid-step, after bucket (\d+) of 4)?)");
  for (std::sregex_iterator it(p.out.begin(), p.out.end(), re), end; it != end; ++it) {
    const int rank = std::stoi((*it)[1]);
    const uint64_t epoch = std::stoull((*it)[2]), step = std::stoull((*it)[3]);
    const int bucket = (*it)[5].matched ? std::stoi((*it)[6]) : 0;
    at[rank][epoch] = {step, bucket};
    if (rank != 0) continue;
    const bool pin_changed = (*it)[4] != pinning;
    pinning = (*it)[4];
    // Drawn at step 4k's first bucket: pinning alike applies after it, else at step 4k + 1.
    if (pin_changed) {
      EXPECT_EQ(bucket, 0) << "epoch " << epoch;
      EXPECT_EQ(step % 4, 1u) << "epoch " << epoch;
      ++kinds["next step"];
    } else {
      EXPECT_EQ(bucket, 1) << "epoch " << epoch;
      EXPECT_EQ(step % 4, 0u) << "epoch " << epoch;
      ++kinds["mid-step"];
    }
  }
  ASSERT_EQ(at.size(), 4u) << p.out;
  EXPECT_EQ(at[0].size(), 19u) << p.out;  // draws at steps 4..76
  for (int r = 1; r < 4; ++r) EXPECT_EQ(at[r], at[0]) << "rank " << r;
  EXPECT_GT(kinds["mid-step"], 0) << p.out;
  EXPECT_GT(kinds["next step"], 0) << p.out;
}

// --duration: rank 0's clock decides, every rank stops after the same step (same parameters).
TEST(TrainE2E, DurationStopsEveryRankAfterTheSameStep) {
  ChildProcess p(cmd({"--ranks", "4", "--duration", "1.5", "--steps", "100000000", "--collector",
                      "none", "--eval-every", "0"}));
  ASSERT_EQ(p.exitCode(60s), 0) << p.err;
  std::set<std::string> steps;
  std::regex re(R"(rank \d+: final step (\d+) )");
  for (std::sregex_iterator it(p.out.begin(), p.out.end(), re), end; it != end; ++it)
    steps.insert((*it)[1]);
  ASSERT_EQ(steps.size(), 1u) << p.out;
  EXPECT_LT(std::stoull(*steps.begin()), 100000000ull) << p.out;
  auto hashes = finalHashes(p.out);
  ASSERT_EQ(hashes.size(), 4u) << p.out;
  for (auto& [rank, h] : hashes) EXPECT_EQ(h, hashes[0]) << "rank " << rank;
}

TEST(TrainE2E, CheckpointAndResumeEqualsUninterruptedRun) {
  const std::vector<std::string> common{"--ranks",       "2", "--switch-every", "7",
                                        "--switch-seed", "5", "--collector",    "none",
                                        "--quiet"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return cmd(a);
  };
  ChildProcess whole(with({"--steps", "120"}));
  ASSERT_EQ(whole.exitCode(60s), 0) << whole.err;
  std::string expected = finalHashes(whole.out)[0];
  ASSERT_FALSE(expected.empty());

  TempDir dir;
  ChildProcess first(
      with({"--steps", "80", "--checkpoint", dir.path(), "--checkpoint-every", "20"}));
  ASSERT_EQ(first.exitCode(60s), 0) << first.err;
  ChildProcess resumed(
      with({"--steps", "120", "--checkpoint", dir.path(), "--checkpoint-every", "20", "--resume"}));
  ASSERT_EQ(resumed.exitCode(60s), 0) << resumed.err;
  auto h = finalHashes(resumed.out);
  EXPECT_EQ(h[0], expected);
  EXPECT_EQ(h[1], expected);

  // Corrupt the newest checkpoint (step 120 was written by the resumed run): resume skips it.
  std::string newest = dir.path() + "/ckpt-00000000000000000120.bin";
  ASSERT_TRUE(fs::exists(newest));
  {
    std::fstream f(newest, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x55');
  }
  // And tear the one before it, as a crash mid-write would.
  fs::resize_file(dir.path() + "/ckpt-00000000000000000100.bin", 4096);
  ChildProcess again(
      with({"--steps", "120", "--checkpoint", dir.path(), "--checkpoint-every", "20", "--resume"}));
  ASSERT_EQ(again.exitCode(60s), 0) << again.err;
  EXPECT_NE(again.err.find("skipping checkpoint"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("CRC32 mismatch"), std::string::npos) << again.err;
  EXPECT_NE(again.err.find("torn"), std::string::npos) << again.err;
  EXPECT_EQ(finalHashes(again.out)[0], expected);
}

TEST(TrainE2E, KilledRankMakesLauncherStopOthersAndNameIt) {
  ChildProcess p(cmd({"--ranks", "3", "--steps", "100000000", "--model", "mlp:128x2", "--collector",
                      "none", "--timeout", "10", "--eval-every", "0"}));
  ASSERT_TRUE(p.readUntil(
      [&] {
        return finalHashes(p.out).empty() &&
               std::regex_search(p.out, std::regex("rank 2: world 3")) &&
               std::regex_search(p.out, std::regex("rank 0: world 3")) &&
               std::regex_search(p.out, std::regex("rank 1: world 3"));
      },
      60s))
      << p.out << p.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(p.out, m, std::regex(R"(launcher: rank 1 pid (\d+))")));
  pid_t victim = std::stoi(m[1]);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(kill(victim, SIGKILL), 0);
  int code = p.exitCode(30s);
  EXPECT_EQ(code, 1) << p.err;
  EXPECT_NE(p.err.find("rank 1 (pid " + std::to_string(victim) + ") killed by signal 9"),
            std::string::npos)
      << p.err;
  EXPECT_NE(p.err.find("failed: rank 1"), std::string::npos) << p.err;
  // The others were stopped within the launcher's stop timeout (10 s) plus slack.
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 25s);
}

TEST(TrainE2E, LauncherForwardsSigterm) {
  ChildProcess p(
      cmd({"--ranks", "2", "--steps", "100000000", "--collector", "none", "--eval-every", "0"}));
  ASSERT_TRUE(p.waitFor("rank 1: world 2", 60s)) << p.err;
  ASSERT_TRUE(p.waitFor("rank 0: world 2", 60s)) << p.err;
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.exitCode(30s), 128 + SIGTERM) << p.err;
}

// A collector stand-in on an ephemeral port.
class UdpSink {
 public:
  UdpSink() {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int big = 4 << 20;
    setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
    testing::bindLoopbackPort0(fd_, &port_);
  }
  ~UdpSink() { close(fd_); }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  void drain() {
    uint8_t buf[65536];
    ssize_t n;
    while ((n = recv(fd_, buf, sizeof(buf), 0)) > 0) {
      std::span<const uint8_t> d(buf, size_t(n));
      wire::FrameView f;
      while (!d.empty() && wire::nextFrame(d, f) == wire::DecodeError::kNone) {
        if (f.header.kind == wire::FrameKind::kHello) {
          wire::HelloView h;
          if (wire::decodeHello(f, h) == wire::DecodeError::kNone) {
            hello_ranks.insert(h.rank);
            tids[h.rank] = h.tidCount();
            sender_rank[f.header.sender_id] = h.rank;
          }
        } else if (f.header.kind == wire::FrameKind::kSamples) {
          wire::SamplesView s;
          if (wire::decodeSamples(f, s) != wire::DecodeError::kNone) continue;
          for (size_t i = 0; i < s.size(); ++i) {
            ++counts[s[i].metric];
            sums[s[i].metric] += s[i].value;
            last[{f.header.sender_id, s[i].metric}] = s[i].value;
          }
        }
      }
    }
  }
  std::set<uint32_t> hello_ranks;
  std::map<uint32_t, size_t> tids;
  std::map<uint64_t, uint32_t> sender_rank;
  std::map<wire::MetricId, int> counts;
  std::map<wire::MetricId, double> sums;
  std::map<std::pair<uint64_t, wire::MetricId>, double> last;

 private:
  int fd_ = -1;
  uint16_t port_ = 0;
};

TEST(TrainE2E, TelemetryFramesDecodeAtTheCollector) {
  UdpSink sink;
  ChildProcess p(cmd({"--ranks", "2", "--steps", "400", "--collector", sink.address(),
                      "--metrics-hz", "50", "--job", "e2e", "--eval-every", "100"}));
  auto deadline = std::chrono::steady_clock::now() + 60s;
  std::optional<int> code;
  while (!code && std::chrono::steady_clock::now() < deadline) {
    sink.drain();
    code = p.wait(50ms);
  }
  sink.drain();
  ASSERT_TRUE(code);
  ASSERT_EQ(*code, 0) << p.err;
  using wire::MetricId;
  EXPECT_EQ(sink.hello_ranks, (std::set<uint32_t>{0, 1}));
  EXPECT_GE(sink.tids[0], 2u);  // main + Gloo + emitter threads at least
  for (MetricId id :
       {MetricId::kStepSeconds, MetricId::kAllreduceSeconds, MetricId::kAllreduceBytes,
        MetricId::kAllreduceBusbwBytesPerSecond, MetricId::kSamplesPerSecond, MetricId::kLoss,
        MetricId::kTopology, MetricId::kPinning, MetricId::kConfigEpoch, MetricId::kStep,
        MetricId::kCheckpointActive, MetricId::kAnonHugePagesBytes, MetricId::kTelemetryDropped})
    EXPECT_GT(sink.counts[id], 0) << wire::metricInfo(id).name;
  EXPECT_GT(sink.counts[MetricId::kAccuracy], 0);
  EXPECT_EQ(sink.counts[MetricId::kStepSeconds], 2 * 400);  // every step of both ranks
  for (auto& [sender, rank] : sink.sender_rank)
    EXPECT_EQ((sink.last[{sender, MetricId::kStep}]), 400) << "rank " << rank;
}

void sendTo(uint16_t port, const std::vector<uint8_t>& d) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  sendto(fd, d.data(), d.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  close(fd);
}

TEST(TrainE2E, SignedDecisionSwitchesEveryRankAtTheSameStepForgedAndReplayedAreRejected) {
  TempDir dir;
  const std::string secret = "e2e-shared-secret";
  std::string secret_file = dir.path() + "/secret";
  std::ofstream(secret_file) << secret;
  chmod(secret_file.c_str(), 0600);
  UdpSink sink;
  ChildProcess p(cmd({"--ranks", "3", "--steps", "100000000", "--adaptive", "--secret", secret_file,
                      "--control", "127.0.0.1:0", "--job", "adapt", "--collector", sink.address(),
                      "--metrics-hz", "50", "--eval-every", "0"}));
  ASSERT_TRUE(p.waitFor("control listening on", 60s)) << p.err;
  std::smatch m;
  ASSERT_TRUE(p.readUntil(
      [&] {
        return std::regex_search(p.out, m,
                                 std::regex(R"(control listening on \S+ \(port (\d+)\))"));
      },
      5s));
  uint16_t port = uint16_t(std::stoi(m[1]));
  for (int r = 0; r < 3; ++r)
    ASSERT_TRUE(p.waitFor("rank " + std::to_string(r) + ": world 3", 60s));

  sendTo(port, signedDecision("adapt", 1, Topology::kBcube, PinMode::kSpread, "forged-key"));
  ASSERT_TRUE(p.waitFor("bad_mac (1 so far)", 30s)) << p.err;
  auto good = signedDecision("adapt", 1, Topology::kHalvingDoubling, PinMode::kCompact, secret);
  sendTo(port, good);
  ASSERT_TRUE(p.readUntil([&] { return appliedSteps(p.out).size() == 3; }, 30s)) << p.out;
  sendTo(port, good);  // a replay
  ASSERT_TRUE(p.waitFor("replay (1 so far)", 30s)) << p.err;
  sendTo(port, signedDecision("adapt", 1, Topology::kBcube, PinMode::kNone, secret));  // stale
  ASSERT_TRUE(p.waitFor("stale_epoch (1 so far)", 30s)) << p.err;

  auto applied = appliedSteps(p.out);
  uint64_t step = applied[0][1];
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(applied[r].size(), 1u) << "rank " << r;
    EXPECT_EQ(applied[r][1], step) << "rank " << r;
    EXPECT_TRUE(std::regex_search(
        p.out,
        std::regex("rank " + std::to_string(r) +
                   ": applied epoch 1 at step \\d+: topology halving-doubling pinning compact")));
  }
  // The applied epoch reaches telemetry from every rank.
  auto deadline = std::chrono::steady_clock::now() + 20s;
  auto epochsSeen = [&] {
    int n = 0;
    for (auto& [sender, rank] : sink.sender_rank)
      n += sink.last[{sender, wire::MetricId::kConfigEpoch}] == 1;
    return n;
  };
  while (epochsSeen() < 3 && std::chrono::steady_clock::now() < deadline) {
    sink.drain();
    usleep(20000);
  }
  EXPECT_EQ(epochsSeen(), 3);
  // Rejections reach telemetry as a counter: bad MAC, replay, stale epoch.
  deadline = std::chrono::steady_clock::now() + 20s;
  while (sink.sums[wire::MetricId::kControlRejected] < 3 &&
         std::chrono::steady_clock::now() < deadline) {
    sink.drain();
    usleep(20000);
  }
  EXPECT_EQ(sink.sums[wire::MetricId::kControlRejected], 3);
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.exitCode(30s), 128 + SIGTERM);
}

TEST(TrainE2E, BadInputGetsOneClearLineAndExit2) {
  struct Case {
    std::vector<std::string> args;
    std::string needle;
  };
  std::vector<Case> cases{
      {{"--bogus"}, "unknown flag --bogus"},
      {{"--rank", "4", "--world", "4", "--store", "/tmp"}, "--rank 4 is not in 0..3"},
      {{"--rank", "1"}, "--rank and --world go together"},
      {{"--ranks", "2", "--rank", "0", "--world", "2"}, "either --ranks N or --rank R --world N"},
      {{"--rank", "0", "--world", "2"}, "needs a rendezvous store"},
      {{"--topology", "star"}, "expected ring, halving-doubling, bcube or hierarchical"},
      {{"--pin", "tight"}, "expected none, compact, spread or numa"},
      {{"--model", "mlp:big"}, "mlp:WIDTHxDEPTH"},
      {{"--metrics-hz", "1000"}, "--metrics-hz 1000"},
      {{"--adaptive"}, "--adaptive needs --secret FILE"},
      {{"--resume"}, "--resume needs --checkpoint DIR"},
      {{"--ranks", "2", "--netns", "a"}, "--netns lists 1 namespaces for --ranks 2"},
      {{"--hugepages", "maybe"}, "expected on or off"},
      {{"--warm-topologies", "maybe"}, "expected on or off"},
      {{"--duration", "-1"}, "--duration -1: expected a positive number of seconds"},
      // --backend nccl takes NCCL's algorithms; what it cannot honour is refused in one line.
      {{"--backend", "nccl", "--adaptive", "--secret", "/nonexistent", "--topology", "tree"},
       "--topology tree with --adaptive: the collector's --nccl-control chooses"},
      {{"--backend", "nccl", "--topology", "bcube"},
       "--topology bcube: with --backend nccl expected one of NCCL's algorithms ring, tree"},
      {{"--backend", "nccl", "--ranks", "2", "--switch-every", "5"},
       "--switch-every draws Gloo topologies: it needs --backend gloo"},
      {{"--backend", "nccl", "--pin", "numa"}, "--pin numa places the model's host memory"},
  };
  for (const Case& c : cases) {
    ChildProcess p(cmd(c.args));
    EXPECT_EQ(p.exitCode(10s), 2) << c.needle;
    EXPECT_NE(p.err.find(c.needle), std::string::npos) << p.err;
    EXPECT_EQ(std::count(p.err.begin(), p.err.end(), '\n'), 1) << p.err;
  }
}

TEST(TrainE2E, WorldSizeFromMpirunEnvironment) {
  // mpirun sets OMPI_COMM_WORLD_*; without a store, the message says where to put one.
  std::vector<std::string> args = cmd({});
  ChildProcess p({"/usr/bin/env", "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", kTrain});
  EXPECT_EQ(p.exitCode(10s), 2);
  EXPECT_NE(p.err.find("rank 1 of 2 needs a rendezvous store"), std::string::npos) << p.err;
}

TEST(TrainE2E, MissingDataFileNamesSetup) {
  ChildProcess p(cmd({"--data", "/nonexistent/digits.csv.gz", "--collector", "none"}));
  EXPECT_EQ(p.exitCode(30s), 1);
  EXPECT_NE(p.err.find("tools/setup"), std::string::npos) << p.err;
}

TEST(TrainE2E, UnreachablePeerTimesOutWithAClearMessage) {
  TempDir store;
  auto t0 = std::chrono::steady_clock::now();
  ChildProcess p(cmd({"--rank", "0", "--world", "2", "--store", store.path(), "--timeout", "2",
                      "--collector", "none"}));
  EXPECT_EQ(p.exitCode(30s), 1);
  EXPECT_NE(p.err.find("rank 0: error:"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("did not join"), std::string::npos) << p.err;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 20s);
}

}  // namespace
}  // namespace bpftrain::trainer

namespace bpftrain::trainer {
namespace {

// GPUs this process may use: /dev/nvidiaN device nodes, narrowed by CUDA_VISIBLE_DEVICES.
int visibleGpus() {
  int nodes = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/dev", ec))
    nodes += std::regex_match(e.path().filename().string(), std::regex(R"(nvidia\d+)"));
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible == nullptr) return nodes;
  const std::string list(visible);
  const int listed = list.empty() ? 0 : int(std::count(list.begin(), list.end(), ',')) + 1;
  return std::min(nodes, listed);
}

// On a GPU host, through NCCL: one rank trains the GPU model (cuBLAS and NVRTC kernels, the CPU
// model's math, so the same test accuracy within 0.05 after the same steps: the sums round in
// another order than OpenBLAS's, so the bits differ), and with two GPUs or more, one rank per GPU
// (NCCL refuses two ranks on one device) ends bit-identical. NCCL rendezvouses through the --store
// directory, where rank 0 publishes its id. Without a GPU (or a build without NCCL) the trainer
// says why and names --backend gloo, and the test skips with that reason.
TEST(TrainE2E, NcclBackendTrainsOnAGpuOrSaysWhyNot) {
  TempDir store;
  fs::create_directories(store.path() + "/one");
  fs::create_directories(store.path() + "/all");
  ChildProcess one(cmd({"--backend", "nccl", "--rank", "0", "--world", "1", "--store",
                        store.path() + "/one", "--steps", "50", "--collector", "none"}));
  const int code = one.exitCode(120s);
  if (code != 0) {
    ASSERT_EQ(code, 1) << one.err;
    const bool no_gpu = one.err.find("no CUDA GPU visible") != std::string::npos;
    const bool no_backend = one.err.find("no NCCL backend") != std::string::npos;
    ASSERT_TRUE(no_gpu || no_backend) << one.err;
    EXPECT_NE(one.err.find("--backend gloo"), std::string::npos) << one.err;
    GTEST_SKIP() << (no_gpu ? "needs a CUDA GPU" : "needs a build with the NCCL backend") << " ("
                 << one.err.substr(0, one.err.find('\n')) << ")";
  }
  ChildProcess gloo(cmd({"--steps", "50", "--collector", "none"}));
  ASSERT_EQ(gloo.exitCode(60s), 0) << gloo.err;
  ASSERT_EQ(finalHashes(one.out).size(), 1u) << one.out;
  ASSERT_GE(finalAccuracy(gloo.out), 0) << gloo.out;
  EXPECT_NEAR(finalAccuracy(one.out), finalAccuracy(gloo.out), 0.05) << one.out << gloo.out;

  const int gpus = visibleGpus();
  if (gpus < 2) return;
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < gpus; ++r)
    ranks.push_back(std::make_unique<ChildProcess>(
        cmd({"--backend", "nccl", "--rank", std::to_string(r), "--world", std::to_string(gpus),
             "--store", store.path() + "/all", "--steps", "50", "--collector", "none"})));
  std::map<int, std::string> hashes;
  for (auto& p : ranks) {
    ASSERT_EQ(p->exitCode(120s), 0) << p->err;
    for (auto& [rank, h] : finalHashes(p->out)) hashes[rank] = h;
  }
  ASSERT_EQ(int(hashes.size()), gpus);
  for (auto& [rank, h] : hashes) EXPECT_EQ(h, hashes[0]) << "rank " << rank;
}

// The NCCL backend loads libcudart and libnccl only when a rank chooses it (nccl_library.h): a
// Gloo rank maps neither, so the binary starts on a host without CUDA. Before, the dynamic linker
// mapped both (libnccl: 218 MiB) into every rank.
TEST(TrainE2E, AGlooRankMapsNeitherNcclNorTheCudaRuntime) {
  ChildProcess p(cmd({"--duration", "1", "--steps", "100000000", "--collector", "none"}));
  const std::string maps_path = "/proc/" + std::to_string(p.pid()) + "/maps";
  std::string maps;
  // Every library the binary links is mapped before main runs; libgloo is one of them.
  ASSERT_TRUE(p.readUntil(
      [&] {
        std::ifstream f(maps_path);
        maps.assign(std::istreambuf_iterator<char>(f), {});
        return maps.find("libgloo") != std::string::npos;
      },
      30s))
      << p.err;
  EXPECT_EQ(maps.find("libnccl"), std::string::npos) << maps;
  EXPECT_EQ(maps.find("libcudart"), std::string::npos) << maps;
  EXPECT_EQ(maps.find("libcublas"), std::string::npos) << maps;  // the GPU model's (trainer/gpu)
  EXPECT_EQ(maps.find("libnvrtc"), std::string::npos) << maps;
  ASSERT_EQ(p.exitCode(60s), 0) << p.err;
}

// Reads each thread's CPU mask from the kernel while a rank runs with --pin spread: the main
// (compute) thread gets its own PU and every other thread (Gloo's device loop, the telemetry
// emitter, BLAS workers) the rank's other PUs.
TEST(TrainE2E, ComputeAndCommunicationThreadsArePinnedAsPlanned) {
  cpu_set_t mine;
  sched_getaffinity(0, sizeof(mine), &mine);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &mine)) cpus.push_back(c);
  if (cpus.size() < 2) GTEST_SKIP() << "needs two CPUs to tell compute and communication apart";
  ChildProcess p(cmd({"--steps", "100000000", "--pin", "spread", "--eval-every", "0", "--collector",
                      "127.0.0.1:9"}));
  ASSERT_TRUE(p.waitFor("rank 0: world 1", 60s)) << p.err;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(p.out, m, std::regex(R"(threads compute (\S+) communication (\S+))")))
      << p.out;
  auto tids = [](const std::string& list) {
    std::vector<pid_t> out;
    std::stringstream ss(list);
    std::string t;
    while (std::getline(ss, t, ',')) out.push_back(std::stoi(t));
    return out;
  };
  std::vector<pid_t> compute = tids(m[1]), comm = tids(m[2]);
  ASSERT_GE(comm.size(), 2u);  // Gloo's device loop and the telemetry emitter
  EXPECT_NE(std::find(compute.begin(), compute.end(), p.pid()), compute.end());
  auto maskOf = [](pid_t t) {
    cpu_set_t s;
    CPU_ZERO(&s);
    sched_getaffinity(t, sizeof(s), &s);
    std::vector<int> out;
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &s)) out.push_back(c);
    return out;
  };
  std::vector<int> rest(cpus.begin() + 1, cpus.end());
  for (pid_t t : compute) EXPECT_EQ(maskOf(t), std::vector<int>{cpus[0]}) << "compute " << t;
  for (pid_t t : comm) EXPECT_EQ(maskOf(t), rest) << "communication " << t;
  kill(p.pid(), SIGTERM);
  p.exitCode(10s);
}

}  // namespace
}  // namespace bpftrain::trainer

namespace bpftrain::trainer {
namespace {

// Two network namespaces joined by a veth pair, removed again even when the test fails.
class NamespacePair {
 public:
  NamespacePair() {
    std::string tag = std::to_string(getpid() % 100000);
    a_ = "bttr" + tag + "a";
    b_ = "bttr" + tag + "b";
    ok_ = run("ip netns add " + a_) && run("ip netns add " + b_) &&
          run("ip link add " + a_ + "v type veth peer name " + b_ + "v") &&
          run("ip link set " + a_ + "v netns " + a_) &&
          run("ip link set " + b_ + "v netns " + b_) &&
          run("ip -n " + a_ + " addr add 10.231.7.1/24 dev " + a_ + "v") &&
          run("ip -n " + b_ + " addr add 10.231.7.2/24 dev " + b_ + "v") &&
          run("ip -n " + a_ + " link set " + a_ + "v up") &&
          run("ip -n " + b_ + " link set " + b_ + "v up") &&
          run("ip -n " + a_ + " link set lo up") && run("ip -n " + b_ + " link set lo up");
  }
  ~NamespacePair() {
    run("ip netns del " + a_ + " 2>/dev/null");
    run("ip netns del " + b_ + " 2>/dev/null");
  }
  bool ok() const { return ok_; }
  std::string a() const { return a_; }
  std::string b() const { return b_; }

 private:
  static bool run(const std::string& c) { return std::system((c + " >/dev/null").c_str()) == 0; }
  std::string a_, b_;
  bool ok_ = false;
};

TEST(TrainE2E, LauncherPlacesRanksInNetworkNamespaces) {
  BPFTRAIN_REQUIRE_ROOT("creating network namespaces");
  NamespacePair ns;
  ASSERT_TRUE(ns.ok()) << "ip netns/veth setup failed";
  ChildProcess p(cmd({"--ranks", "2", "--netns", ns.a() + "," + ns.b(), "--steps", "100",
                      "--collector", "none", "--topology", "hierarchical"}));
  ASSERT_EQ(p.exitCode(60s), 0) << p.err;
  auto h = finalHashes(p.out);
  ASSERT_EQ(h.size(), 2u) << p.out;
  EXPECT_EQ(h[0], h[1]);
  EXPECT_NE(p.out.find("rank 0 pid"), std::string::npos);
  EXPECT_NE(p.out.find(" netns " + ns.a()), std::string::npos);
  // Each namespace is its own node: local world 1 each.
  EXPECT_NE(p.out.find("rank 1: world 2 (flags), local rank 0/1"), std::string::npos) << p.out;
}

TEST(TrainE2E, MissingNamespaceNamesTheFix) {
  BPFTRAIN_REQUIRE_ROOT("entering network namespaces");
  ChildProcess p(cmd({"--ranks", "2", "--netns", "bttr-none-a,bttr-none-b", "--steps", "10",
                      "--collector", "none"}));
  EXPECT_EQ(p.exitCode(60s), 1);
  EXPECT_NE(p.err.find("cannot enter network namespace bttr-none-"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("ip netns add"), std::string::npos) << p.err;
}

}  // namespace
}  // namespace bpftrain::trainer

namespace bpftrain::trainer {
namespace {

TEST(TrainE2E, DeadPeerGivesAClearErrorNotAHang) {
  TempDir store;
  auto rank = [&](int r) {
    return cmd({"--rank", std::to_string(r), "--world", "2", "--store", store.path(), "--steps",
                "100000000", "--collector", "none", "--eval-every", "0", "--timeout", "5"});
  };
  ChildProcess r0(rank(0)), r1(rank(1));
  ASSERT_TRUE(r0.waitFor("rank 0: world 2", 60s)) << r0.err;
  ASSERT_TRUE(r1.waitFor("rank 1: world 2", 60s)) << r1.err;
  kill(r1.pid(), SIGKILL);
  EXPECT_EQ(r0.exitCode(30s), 1);
  EXPECT_NE(r0.err.find("rank 0: error:"), std::string::npos) << r0.err;
  EXPECT_NE(r0.err.find("peer"), std::string::npos) << r0.err;
}

}  // namespace
}  // namespace bpftrain::trainer
