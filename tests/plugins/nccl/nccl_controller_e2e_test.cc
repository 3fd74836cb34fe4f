// The NCCL controller end to end: a real bpftrain-collector with --nccl-control (port 0) and two
// simulated NCCL ranks (nccl_rank_sim --job) that load the real libnccl-bpftrain.so, whose
// collective times depend on the pair the tuner left NCCL with (TREE/LL fastest). The controller
// must measure NCCL's own choice, try the pairs the profiler showed, and settle on TREE/LL; both
// ranks must make every switch at the same getCollInfo call (the decisions' start calls), NCCL's
// choice must be untouched before the first decision, and the decisions log and
// bpftrain_controller_decisions_total must record the switch.
#include <gtest/gtest.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>

#include "tests/plugins/nccl/plugin_harness.h"
#include "tests/support/collector_process.h"
#include "tests/support/temp_dir.h"

namespace bpftrain::testing::nccl {
namespace {

using namespace std::chrono_literals;
using Switches = std::vector<std::pair<long, std::string>>;

Switches switchesIn(const std::string& out) {
  Switches s;
  static const std::regex re("switch call=([0-9]+) to=([A-Za-z_0-9/]+)");
  for (auto it = std::sregex_iterator(out.begin(), out.end(), re); it != std::sregex_iterator();
       ++it)
    s.emplace_back(std::stol((*it)[1]), (*it)[2]);
  return s;
}

std::vector<nlohmann::json> logLines(const std::string& path) {
  std::vector<nlohmann::json> lines;
  std::ifstream in(path);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(nlohmann::json::parse(l, nullptr, false));
  return lines;
}

TEST(NcclControllerE2e, BothRanksSwitchToTheFasterPairAtTheSameCall) {
  const auto started = std::chrono::steady_clock::now();
  TempDir dir("bpftrain-nccl-ctl");
  ASSERT_FALSE(dir.path().empty());
  const std::string secret = dir.path() + "/secret", log = dir.path() + "/decisions.jsonl";
  {
    std::ofstream s(secret);
    s << kSecret;
  }
  ASSERT_EQ(chmod(secret.c_str(), 0600), 0);
  CollectorProcess collector(
      {"--no-bpf", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0", "--window", "10s",
       "--step", "200ms", "--nccl-control", "--secret", secret, "--decisions-log", log},
      20s);
  ASSERT_GT(collector.udp_port, 0) << collector.proc->err;
  setenv("BPFTRAIN_COLLECTOR", ("127.0.0.1:" + std::to_string(collector.udp_port)).c_str(), 1);
  setenv("BPFTRAIN_JOB", "nccljob", 1);
  setenv("BPFTRAIN_SECRET_FILE", secret.c_str(), 1);
  setenv("BPFTRAIN_NCCL_FLUSH_MS", "50", 1);
  std::vector<std::unique_ptr<ChildProcess>> ranks;
  for (int r = 0; r < 2; ++r)
    ranks.push_back(std::make_unique<ChildProcess>(
        std::vector<std::string>{buildPath("tests/plugins/nccl/nccl_rank_sim"), "--job",
                                 pluginPath("libnccl-bpftrain.so"), std::to_string(r), "28"}));

  // Explore TREE/LL, explore RING/LL128, keep TREE/LL: three switches on each rank.
  auto settled = [&] {
    for (auto& r : ranks) {
      Switches s = switchesIn(r->out);
      if (s.size() < 3 || s.back().second != "TREE/LL") return false;
    }
    return true;
  };
  const auto deadline = std::chrono::steady_clock::now() + 25s;
  while (!settled() && std::chrono::steady_clock::now() < deadline)
    for (auto& r : ranks) r->readUntil([&] { return settled(); }, 50ms);
  // The collector sees the last switch applied once both ranks' next reports arrive.
  auto exploitApplied = [&] {
    uint64_t epoch = 0;
    bool done = false;
    for (const nlohmann::json& j : logLines(log)) {
      if (j.is_discarded()) continue;
      if (j["event"] == "decision" && j["reason"] == "exploit") epoch = j["epoch"].get<uint64_t>();
      if (j["event"] == "applied" && epoch > 0 && j["epoch"] == epoch) done = true;
    }
    return done;
  };
  const auto applied_deadline = std::chrono::steady_clock::now() + 5s;
  while (settled() && !exploitApplied() && std::chrono::steady_clock::now() < applied_deadline)
    for (auto& r : ranks) r->readUntil([] { return false; }, 50ms);
  for (auto& r : ranks) kill(r->pid(), SIGTERM);
  for (auto& r : ranks) EXPECT_EQ(r->exitCode(10s), 0) << r->err;

  const Switches s0 = switchesIn(ranks[0]->out), s1 = switchesIn(ranks[1]->out);
  ASSERT_GE(s0.size(), 3u) << "rank 0: " << ranks[0]->out << "\ncollector: " << collector.proc->err;
  EXPECT_EQ(s0, s1) << "ranks switched at different calls: hung in a real NCCL job";
  EXPECT_EQ(s0.back().second, "TREE/LL");
  for (auto& r : ranks)
    EXPECT_NE(r->out.find("left_alone=yes"), std::string::npos)
        << "NCCL's own choice changed before any decision: " << r->out;

  // Each switch happened at exactly the start call of a decision, in order; the last is the
  // exploit decision, and the log says it was applied.
  std::vector<nlohmann::json> decisions, applied;
  for (const nlohmann::json& j : logLines(log)) {
    ASSERT_FALSE(j.is_discarded());
    if (j["event"] == "decision") decisions.push_back(j);
    if (j["event"] == "applied") applied.push_back(j);
  }
  ASSERT_GE(decisions.size(), s0.size());
  for (size_t i = 0; i < s0.size(); ++i) {
    EXPECT_EQ(decisions[i]["start_call"].get<long>(), s0[i].first) << decisions[i].dump();
    EXPECT_EQ(decisions[i]["policy"], "nccl");
    EXPECT_EQ(decisions[i]["ranks"], 2);
    // Chosen ahead of every rank's reported progress.
    EXPECT_GT(decisions[i]["start_call"].get<double>(), decisions[i]["progress_max"].get<double>());
  }
  const nlohmann::json& exploit = decisions[s0.size() - 1];
  EXPECT_EQ(exploit["reason"], "exploit");
  EXPECT_EQ(exploit["from"], "ring/ll128");
  EXPECT_EQ(exploit["to"], "tree/ll");
  EXPECT_EQ(decisions[0]["from"], "nccl");
  bool exploit_applied = false;
  for (const nlohmann::json& a : applied) exploit_applied |= a["epoch"] == exploit["epoch"];
  EXPECT_TRUE(exploit_applied);

  const std::string key =
      "bpftrain_controller_decisions_total{from=\"ring/ll128\",reason=\"exploit\",to=\"tree/ll\"}";
  auto m =
      collector.scrapeUntil([&](const CollectorProcess::Metrics& x) { return x.count(key); }, 5s);
  EXPECT_EQ(m.count(key) ? m.at(key) : 0, 1) << key;

  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  std::printf("switches at calls");
  for (auto& [call, arm] : s0) std::printf(" %ld (%s)", call, arm.c_str());
  std::printf("; exploit lead %s calls, applied %.2f s after it; test %.1f s\n",
              exploit["lead_calls"].dump().c_str(),
              applied.empty() ? -1.0 : applied.back()["apply_latency_s"].get<double>(), seconds);
}

}  // namespace
}  // namespace bpftrain::testing::nccl
