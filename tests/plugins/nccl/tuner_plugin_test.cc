// The tuner half of libnccl-bpftrain.so, loaded as NCCL loads it (plugin_harness.h): NCCL's
// choice follows a signed decision from exactly its start call, unsupported entries are never
// raised, nothing changes without a decision, forged/stale/late decisions are refused, and
// ranks in separate processes, and many communicators on several threads, switch at the same
// call. Each ctest case is its own process, so each gets a fresh plugin instance.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <atomic>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "tests/plugins/nccl/plugin_harness.h"
#include "tests/support/requirements.h"
#include "tests/support/temp_dir.h"

// Decisions are written with designated initializers naming only what they set; the rest keep
// NcclControl's defaults, which GCC would otherwise warn about field by field.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace bpftrain::testing::nccl {
namespace {

using namespace std::chrono_literals;

constexpr uint64_t kComm = 0x1234abcd5678ef00ull;

std::string run(const std::string& cmd) {
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
    pclose(p);
  }
  return out;
}

// The environment the plugin reads at its first init, with a secret file and the fake
// collector's address.
class TunerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    secret_path_ = dir_.path() + "/secret";
    std::ofstream(secret_path_) << kSecret;
    chmod(secret_path_.c_str(), 0600);
    setenv("BPFTRAIN_COLLECTOR", collector_.address().c_str(), 1);
    setenv("BPFTRAIN_SECRET_FILE", secret_path_.c_str(), 1);
    setenv("BPFTRAIN_JOB", "tunerjob", 1);
    setenv("RANK", "0", 1);
    setenv("BPFTRAIN_NCCL_FLUSH_MS", "20", 1);
  }

  void* open(uint64_t comm = kComm) {
    void* ctx = nullptr;
    EXPECT_EQ(plugin_.tuner_v5->init(&ctx, comm, 8, 1, &LogCapture::logger, nullptr, nullptr),
              abi::ncclSuccess);
    return ctx;
  }
  // The plugin's hello arrived: its address is where decisions go.
  FakeCollector::Sender rank0() {
    EXPECT_TRUE(collector_.receiveUntil([&] { return !collector_.senders.empty(); }, 10s));
    return collector_.senders.empty() ? FakeCollector::Sender{}
                                      : collector_.senders.begin()->second;
  }
  void decide(wire::NcclControl c) {
    c.job = "tunerjob";
    size_t before = LogCapture::count("tuner decision accepted");
    collector_.sendDecision(c, rank0());
    ASSERT_TRUE(LogCapture::waitFor("tuner decision accepted", before + 1, 10s));
  }
  // The plugin's counters, from the frames it flushes every 20 ms.
  double refused(const std::string& reason, double at_least) {
    std::string key = "bpftrain_nccl_decisions_refused{" + reason + "}";
    collector_.receiveUntil([&] { return collector_.values[key] >= at_least; }, 5s);
    return collector_.values[key];
  }

  TempDir dir_{"bpftrain-nccl-tuner"};
  std::string secret_path_;
  FakeCollector collector_;
  Plugin plugin_;
};

TEST(NcclPluginLibrary, ExportsExactlyThePluginStructsAndNeedsNoNccl) {
  BPFTRAIN_REQUIRE_TOOL("nm");
  BPFTRAIN_REQUIRE_TOOL("readelf");
  const std::string lib = pluginPath("libnccl-bpftrain.so");
  std::set<std::string> symbols;
  std::istringstream nm(run("nm -D --defined-only " + lib));
  for (std::string line; std::getline(nm, line);) {
    std::istringstream fields(line);
    std::string addr, type, name;
    fields >> addr >> type >> name;
    if (!name.empty()) symbols.insert(name + ":" + type);
  }
  EXPECT_EQ(symbols,
            (std::set<std::string>{"ncclProfiler_v4:D", "ncclProfiler_v5:D", "ncclTunerPlugin_v3:D",
                                   "ncclTunerPlugin_v4:D", "ncclTunerPlugin_v5:D"}));
  const std::string dynamic = run("readelf -d " + lib);
  std::regex needed(R"(\(NEEDED\)\s+Shared library: \[([^\]]+)\])");
  std::set<std::string> libs;
  for (auto it = std::sregex_iterator(dynamic.begin(), dynamic.end(), needed);
       it != std::sregex_iterator(); ++it)
    libs.insert((*it)[1]);
  EXPECT_FALSE(libs.empty()) << dynamic;
  for (const std::string& l : libs) {
    EXPECT_EQ(l.find("nccl"), std::string::npos) << l;
    EXPECT_EQ(l.find("cuda"), std::string::npos) << l;
    EXPECT_EQ(l.find("libstdc++"), std::string::npos) << l;  // carried inside
  }
  EXPECT_NE(dynamic.find("NODELETE"), std::string::npos) << dynamic;
}

TEST(NcclPluginLibrary, BothNamesLoadOneInstanceWithEveryVersion) {
  setenv("BPFTRAIN_COLLECTOR", "off", 1);
  Plugin tuner(pluginPath("libnccl-tuner-bpftrain.so"));
  Plugin profiler(pluginPath("libnccl-profiler-bpftrain.so"));
  ASSERT_NE(tuner.handle, nullptr) << tuner.error;
  ASSERT_NE(profiler.handle, nullptr) << profiler.error;
  EXPECT_EQ(tuner.handle, profiler.handle);
  for (const Plugin* p : {&tuner, &profiler}) {
    ASSERT_NE(p->tuner_v5, nullptr);
    ASSERT_NE(p->tuner_v4, nullptr);
    ASSERT_NE(p->tuner_v3, nullptr);
    ASSERT_NE(p->profiler_v5, nullptr);
    ASSERT_NE(p->profiler_v4, nullptr);
    EXPECT_STREQ(p->tuner_v5->name, "bpftrain");
    EXPECT_STREQ(p->profiler_v5->name, "bpftrain");
  }
  EXPECT_EQ(tuner.tuner_v5, profiler.tuner_v5);
}

TEST_F(TunerTest, WithoutADecisionNothingChanges) {
  void* ctx = open();
  ASSERT_NE(ctx, nullptr);
  const Table original = ncclTable();
  for (int call = 0; call < 1000; ++call) {
    Table t = original;
    int channels = -1;
    abi::ncclResult_t r;
    auto chosen = tunerCall(plugin_.tuner_v5, ctx, t, &channels, abi::ncclFuncAllReduce, &r);
    ASSERT_EQ(r, abi::ncclSuccess);
    ASSERT_EQ(t, original) << "call " << call;
    ASSERT_EQ(chosen, std::make_pair(TREE, LL));
    ASSERT_EQ(channels, 0);
  }
  EXPECT_EQ(plugin_.tuner_v5->finalize(ctx), abi::ncclSuccess);
}

TEST_F(TunerTest, ADecisionAppliesFromItsStartCallOn) {
  void* ctx = open();
  rank0();
  decide({.epoch = 1,
          .comm_id = kComm,
          .start_call = 20,
          .algorithm = RING,
          .protocol = SIMPLE,
          .channels = 4});
  for (int call = 0; call < 60; ++call) {
    const Table before = ncclTable();
    Table t = before;
    int channels = -1;
    auto chosen = tunerCall(plugin_.tuner_v5, ctx, t, &channels);
    ASSERT_TRUE(noEntryRaised(before, t)) << "call " << call;
    if (call < 20) {
      ASSERT_EQ(chosen, std::make_pair(TREE, LL)) << "call " << call;
      ASSERT_EQ(t, before);
      ASSERT_EQ(channels, 0);
    } else {
      ASSERT_EQ(chosen, std::make_pair(RING, SIMPLE)) << "call " << call;
      ASSERT_EQ(channels, 4);
    }
  }
  // A newer decision hands the choice back to NCCL from its own start call.
  decide({.epoch = 2, .comm_id = kComm, .start_call = 70, .algorithm = wire::kNcclAny});
  for (int call = 60; call < 80; ++call) {
    Table t = ncclTable();
    auto chosen = tunerCall(plugin_.tuner_v5, ctx, t);
    ASSERT_EQ(chosen, call < 70 ? std::make_pair(RING, SIMPLE) : std::make_pair(TREE, LL))
        << "call " << call;
  }
  // Progress and the epoch in force are reported to the collector.
  std::string comm = "1234abcd5678ef00";
  EXPECT_TRUE(collector_.receiveUntil(
      [&] {
        return collector_.values["bpftrain_nccl_tuner_calls{" + comm + "}"] == 80 &&
               collector_.values["bpftrain_nccl_decision_epoch{" + comm + "}"] == 2;
      },
      5s));
  plugin_.tuner_v5->finalize(ctx);
}

TEST_F(TunerTest, UnsupportedChoicesLeaveNcclsChoice) {
  void* ctx = open();
  rank0();
  // NVLS is -1 in this table (no NVLS on the node): never raised, NCCL keeps TREE/LL.
  decide({.epoch = 1, .comm_id = kComm, .start_call = 0, .algorithm = NVLS, .protocol = SIMPLE});
  for (int call = 0; call < 10; ++call) {
    const Table before = ncclTable();
    Table t = before;
    int channels = -1;
    EXPECT_EQ(tunerCall(plugin_.tuner_v5, ctx, t, &channels), std::make_pair(TREE, LL));
    EXPECT_EQ(t, before);
    EXPECT_EQ(channels, 0);
  }
  EXPECT_EQ(refused("unsupported", 10), 10);
  // PAT with any protocol: every PAT entry is -1, so nothing to pick either.
  decide({.epoch = 2, .comm_id = kComm, .start_call = 10, .algorithm = PAT});
  Table t = ncclTable();
  EXPECT_EQ(tunerCall(plugin_.tuner_v5, ctx, t), std::make_pair(TREE, LL));
  EXPECT_EQ(t, ncclTable());
  EXPECT_EQ(refused("unsupported", 11), 11);
  plugin_.tuner_v5->finalize(ctx);
}

TEST_F(TunerTest, AnyProtocolTakesTheAlgorithmsCheapestAndZeroTiesAreBroken) {
  void* ctx = open();
  rank0();
  decide({.epoch = 1, .comm_id = kComm, .start_call = 0, .algorithm = RING});
  Table t = ncclTable();
  EXPECT_EQ(tunerCall(plugin_.tuner_v5, ctx, t), std::make_pair(RING, LL128));
  // An entry already at 0 ahead of the chosen one would win NCCL's scan: it is excluded.
  decide({.epoch = 2, .comm_id = kComm, .start_call = 1, .algorithm = RING, .protocol = SIMPLE});
  Table z = ncclTable();
  z[TREE * 3 + LL] = 0.0f;
  EXPECT_EQ(tunerCall(plugin_.tuner_v5, ctx, z), std::make_pair(RING, SIMPLE));
  plugin_.tuner_v5->finalize(ctx);
}

TEST_F(TunerTest, ADecisionForOneCollectiveLeavesTheOthers) {
  void* ctx = open();
  rank0();
  decide({.epoch = 1,
          .comm_id = kComm,
          .start_call = 0,
          .collective = abi::ncclFuncAllReduce,
          .algorithm = RING,
          .protocol = SIMPLE});
  Table a = ncclTable(), b = ncclTable();
  EXPECT_EQ(tunerCall(plugin_.tuner_v5, ctx, a, nullptr, abi::ncclFuncAllReduce),
            std::make_pair(RING, SIMPLE));
  EXPECT_EQ(tunerCall(plugin_.tuner_v5, ctx, b, nullptr, abi::ncclFuncBroadcast),
            std::make_pair(TREE, LL));
  EXPECT_EQ(b, ncclTable());
  plugin_.tuner_v5->finalize(ctx);
}

TEST_F(TunerTest, ADecisionWhoseStartCallPassedIsRefusedAsLate) {
  void* ctx = open();
  rank0();
  for (int call = 0; call < 50; ++call) {
    Table t = ncclTable();
    tunerCall(plugin_.tuner_v5, ctx, t);
  }
  decide({.epoch = 1, .comm_id = kComm, .start_call = 10, .algorithm = RING, .protocol = SIMPLE});
  for (int call = 50; call < 100; ++call) {
    Table t = ncclTable();
    ASSERT_EQ(tunerCall(plugin_.tuner_v5, ctx, t), std::make_pair(TREE, LL));
    ASSERT_EQ(t, ncclTable());
  }
  EXPECT_EQ(refused("late", 1), 1);
  plugin_.tuner_v5->finalize(ctx);
}

TEST_F(TunerTest, ForgedReplayedStaleAndMalformedDecisionsAreRefused) {
  void* ctx = open();
  FakeCollector::Sender to = rank0();
  wire::NcclControl c{.job = "tunerjob",
                      .epoch = 5,
                      .comm_id = kComm,
                      .start_call = 0,
                      .algorithm = RING,
                      .protocol = SIMPLE};
  collector_.sendDecision(c, to, "not-the-secret");
  EXPECT_EQ(refused("bad_mac", 1), 1);
  wire::NcclControl other = c;
  other.job = "otherjob";
  collector_.sendDecision(other, to);
  EXPECT_EQ(refused("wrong_job", 1), 1);
  wire::NcclControl old = c;
  old.timestamp_ns = realtimeNowNs() - 3600'000'000'000ull;
  collector_.sendDecision(old, to);
  EXPECT_EQ(refused("clock_skew", 1), 1);
  wire::NcclControl unknown = c;
  unknown.algorithm = 9;
  collector_.sendDecision(unknown, to);
  EXPECT_EQ(refused("unknown_value", 1), 1);
  collector_.sendRaw({1, 2, 3}, to);
  EXPECT_EQ(refused("malformed", 1), 1);
  // The genuine one is accepted; the same bytes again are a replay, an older epoch is stale.
  c.timestamp_ns = realtimeNowNs();
  std::vector<uint8_t> genuine(wire::kMaxFrameSize);
  genuine.resize(wire::encodeSignedNcclControl(genuine, 1, 5, c, kSecret));
  collector_.sendRaw(genuine, to);
  ASSERT_TRUE(LogCapture::waitFor("tuner decision accepted", 1, 10s));
  collector_.sendRaw(genuine, to);
  EXPECT_EQ(refused("replay", 1), 1);
  wire::NcclControl stale = c;
  stale.epoch = 4;
  collector_.sendDecision(stale, to);
  EXPECT_EQ(refused("stale_epoch", 1), 1);
  Table t = ncclTable();
  EXPECT_EQ(tunerCall(plugin_.tuner_v5, ctx, t), std::make_pair(RING, SIMPLE));  // epoch 5 only
  plugin_.tuner_v5->finalize(ctx);
}

TEST_F(TunerTest, WithoutASecretEveryDecisionIsRefused) {
  unsetenv("BPFTRAIN_SECRET_FILE");
  void* ctx = open();
  collector_.sendDecision(
      {.job = "tunerjob", .epoch = 1, .start_call = 0, .algorithm = RING, .protocol = SIMPLE},
      rank0());
  EXPECT_EQ(refused("no_secret", 1), 1);
  Table t = ncclTable();
  EXPECT_EQ(tunerCall(plugin_.tuner_v5, ctx, t), std::make_pair(TREE, LL));
  plugin_.tuner_v5->finalize(ctx);
}

// Before v5 NCCL passes no commId: only decisions for every communicator (comm 0) apply.
TEST_F(TunerTest, VersionsThreeAndFourApplyDecisionsForEveryCommunicator) {
  void *ctx4 = nullptr, *ctx3 = nullptr;
  ASSERT_EQ(plugin_.tuner_v4->init(8, 1, &LogCapture::logger, &ctx4), abi::ncclSuccess);
  ASSERT_EQ(plugin_.tuner_v3->init(8, 1, &LogCapture::logger, &ctx3), abi::ncclSuccess);
  rank0();
  decide({.epoch = 1, .comm_id = kComm, .start_call = 0, .algorithm = RING, .protocol = LL});
  Table t4 = ncclTable(), t3 = ncclTable();
  int n = 0;
  plugin_.tuner_v4->getCollInfo(ctx4, abi::ncclFuncAllReduce, 1 << 20, 1,
                                reinterpret_cast<float**>(t4.data()), 7, 3, 0, &n);
  plugin_.tuner_v3->getCollInfo(ctx3, abi::ncclFuncAllReduce, 1 << 20, 1,
                                reinterpret_cast<float**>(t3.data()), 7, 3, &n);
  EXPECT_EQ(ncclSelect(t4), std::make_pair(TREE, LL));  // a decision for another comm
  EXPECT_EQ(ncclSelect(t3), std::make_pair(TREE, LL));
  decide({.epoch = 2, .comm_id = 0, .start_call = 1, .algorithm = RING, .protocol = LL});
  t4 = ncclTable();
  t3 = ncclTable();
  plugin_.tuner_v4->getCollInfo(ctx4, abi::ncclFuncAllReduce, 1 << 20, 1,
                                reinterpret_cast<float**>(t4.data()), 7, 3, 0, &n);
  plugin_.tuner_v3->getCollInfo(ctx3, abi::ncclFuncAllReduce, 1 << 20, 1,
                                reinterpret_cast<float**>(t3.data()), 7, 3, &n);
  EXPECT_EQ(ncclSelect(t4), std::make_pair(RING, LL));
  EXPECT_EQ(ncclSelect(t3), std::make_pair(RING, LL));
  EXPECT_EQ(plugin_.tuner_v4->destroy(ctx4), abi::ncclSuccess);
  EXPECT_EQ(plugin_.tuner_v3->destroy(ctx3), abi::ncclSuccess);
}

TEST_F(TunerTest, ManyCommunicatorsOnSeveralThreadsSwitchAtTheSameCall) {
  void* keep = open(1);  // holds the agent while the threads open and close theirs
  rank0();
  decide({.epoch = 1, .comm_id = 0, .start_call = 300, .algorithm = RING, .protocol = SIMPLE});
  constexpr int kThreads = 8, kCommsPerThread = 4, kCalls = 600;
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int th = 0; th < kThreads; ++th)
    threads.emplace_back([&, th] {
      std::vector<void*> ctxs;
      for (int c = 0; c < kCommsPerThread; ++c) ctxs.push_back(open(0x1000 + th * 16 + c));
      for (int call = 0; call < kCalls; ++call)
        for (void* ctx : ctxs) {
          Table t = ncclTable();
          auto want = call < 300 ? std::make_pair(TREE, LL) : std::make_pair(RING, SIMPLE);
          if (tunerCall(plugin_.tuner_v5, ctx, t) != want) ++wrong;
        }
      for (void* ctx : ctxs) plugin_.tuner_v5->finalize(ctx);
      ++done;
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(done.load(), kThreads);
  EXPECT_EQ(wrong.load(), 0);
  plugin_.tuner_v5->finalize(keep);
}

// N ranks, each its own process with the plugin (nccl_rank_sim), report their progress; the
// decision goes out with a start call ahead of every rank's reported calls, as the controller
// must choose it, and every rank switches at exactly that call.
TEST_F(TunerTest, RanksInSeparateProcessesSwitchAtTheSameCall) {
  constexpr int kRanks = 4;
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < kRanks; ++r) {
    setenv("RANK", std::to_string(r).c_str(), 1);
    ranks.push_back(std::make_unique<ChildProcess>(std::vector<std::string>{
        buildPath("tests/plugins/nccl/nccl_rank_sim"), pluginPath(), "4000", "2"}));
  }
  ASSERT_TRUE(collector_.receiveUntil(
      [&] {
        if (collector_.tuner_calls.size() < size_t(kRanks)) return false;
        for (auto& [id, calls] : collector_.tuner_calls)
          if (calls == 0) return false;
        return collector_.senders.size() >= size_t(kRanks);
      },
      20s));
  uint64_t ahead = 0;
  for (auto& [id, calls] : collector_.tuner_calls) ahead = std::max(ahead, calls);
  const uint64_t start = ahead + 150;  // 300 ms at one call per 2 ms: more than a flush late
  for (auto& [id, sender] : collector_.senders)
    collector_.sendDecision({.job = "tunerjob",
                             .epoch = 1,
                             .comm_id = 0x5eed,
                             .start_call = start,
                             .algorithm = RING,
                             .protocol = SIMPLE},
                            sender);
  std::set<std::string> switched;
  for (auto& rank : ranks) {
    ASSERT_EQ(rank->exitCode(60s), 0) << rank->out << rank->err;
    std::smatch m;
    std::regex re("switched at ([0-9]+), consistent");
    ASSERT_TRUE(std::regex_search(rank->out, m, re)) << rank->out;
    switched.insert(m[1]);
  }
  EXPECT_EQ(switched, std::set<std::string>{std::to_string(start)});
}

}  // namespace
}  // namespace bpftrain::testing::nccl
