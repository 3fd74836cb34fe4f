// The closed loop in netlab (root, e2e): 4 ranks of bpftrain-train as 2 hosts x 2, adaptive,
// steered by bpftrain-collector --control (ingest, windows, BPF probes, ControllerService) with
// the BPF transport probes. Three scenarios:
// - intra-host TCP throttled (TBF on lo in both hosts) 6 s in, under the rules policy: the flat
//   ring's bus bandwidth collapses and every rank must be on the hierarchical topology (whose node
//   stage uses shared memory) within the deadline and stay there but for budgeted re-probes;
// - host1's uplink throttled to 2 Gbit/s and lifted again (five-phase.json's uplink phase),
//   under each policy: hierarchical after the onset, the diagnosis naming the inter-host link,
//   and the ring again after the lift (the way back, which hierarchical's own signals do not
//   show: its leaders' RTT sits around the low thresholds either way);
// - the other order under the rules: every uplink throttled and lifted, then lo inside both
//   hosts throttled and lifted, each met, diagnosed and left.
// At the end every rank's parameter hash is identical. The lab and every process are removed
// even when an assertion fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include "tests/support/requirements.h"
#include "tests/tools/netlab_util.h"

namespace bpftrain::tools::testing {
namespace {

using namespace std::chrono_literals;

constexpr int kRing = 0, kHalvingDoubling = 1,
              kHierarchical = 3;  // common/training_config.h's Topology

std::string buildDir() {
  const char* b = std::getenv("BPFTRAIN_BUILD_DIR");
  return b != nullptr ? b : ".";
}

// What one adaptive run left: when each phase began, every rank's topology over time (the
// telemetry sink's lines), the collector's decisions log and the trainer's output.
struct AdaptiveRun {
  CommandResult result;
  std::map<std::string, int64_t> phase_ns;
  // After each telemetry line: its time and the topology every rank reported last, when all 4
  // agree (-1: they do not, or a rank was not seen yet).
  std::vector<std::pair<int64_t, int>> topologies;
  std::vector<nlohmann::json> decisions_log;
  std::string decisions_text;

  // The first time at or after `from_ns` when every rank reported one of `any` (the same one);
  // 0 if never.
  int64_t allOn(const std::vector<int>& any, int64_t from_ns) const {
    for (const auto& [t, all_on] : topologies)
      if (t >= from_ns && std::find(any.begin(), any.end(), all_on) != any.end()) return t;
    return 0;
  }
  int64_t allOn(int topology, int64_t from_ns) const {
    return allOn(std::vector<int>{topology}, from_ns);
  }
  // The share of [from_ns, to_ns) during which every rank was on one of `any`.
  double shareAllOn(const std::vector<int>& any, int64_t from_ns, int64_t to_ns) const {
    int64_t on = 0;
    for (size_t i = 0; i + 1 < topologies.size(); ++i) {
      const auto& [t, all_on] = topologies[i];
      const int64_t a = std::max(t, from_ns), b = std::min(topologies[i + 1].first, to_ns);
      if (b > a && std::find(any.begin(), any.end(), all_on) != any.end()) on += b - a;
    }
    return to_ns > from_ns ? double(on) / double(to_ns - from_ns) : 0;
  }
  double shareAllOn(int topology, int64_t from_ns, int64_t to_ns) const {
    return shareAllOn(std::vector<int>{topology}, from_ns, to_ns);
  }
  // One congested phase [onset_ns, lift_ns) and the clear one after it, up to end_ns: how soon
  // every rank ran one of `climbed` after the onset and which share of the phase they stayed
  // there, how soon the diagnosis named a congested link whose name starts with `link`, and how
  // soon after the lift every rank ran one of `way_back` and the share of the clear phase there.
  // A time is -1 where it never came.
  struct PhaseVerdict {
    double onset_s = -1, diagnosis_s = -1, back_s = -1;
    double share_climbed = 0, share_back = 0;
  };
  PhaseVerdict judge(int64_t onset_ns, int64_t lift_ns, int64_t end_ns,
                     const std::vector<int>& climbed, const std::vector<int>& way_back,
                     const std::string& link) const {
    PhaseVerdict v;
    const int64_t climbed_ns = allOn(climbed, onset_ns);
    if (climbed_ns > 0 && climbed_ns < lift_ns) {
      v.onset_s = double(climbed_ns - onset_ns) * 1e-9;
      v.share_climbed = shareAllOn(climbed, climbed_ns, lift_ns);
    }
    for (const nlohmann::json& j : decisions_log) {
      const int64_t t = j["wall_ns"].get<int64_t>();
      if (t >= onset_ns && t < lift_ns && j.value("event", "") == "diagnosis" &&
          j.value("cause", "") == "congested_link" && j.value("link", "").rfind(link, 0) == 0) {
        v.diagnosis_s = double(t - onset_ns) * 1e-9;
        break;
      }
    }
    const int64_t back_ns = allOn(way_back, lift_ns);
    if (back_ns > 0 && back_ns < end_ns) {
      v.back_s = double(back_ns - lift_ns) * 1e-9;
      v.share_back = shareAllOn(way_back, back_ns, end_ns);
    }
    return v;
  }
  // Parameters bit-identical across the 4 ranks after the live switches.
  void expectIdenticalParameters() const {
    std::regex hash_re("rank (\\d+): final .* params_hash (0x[0-9a-f]+)");
    std::set<std::string> hashes;
    int ranks = 0;
    for (std::sregex_iterator it(result.out.begin(), result.out.end(), hash_re), end; it != end;
         ++it) {
      hashes.insert((*it)[2]);
      ++ranks;
    }
    EXPECT_EQ(ranks, 4) << result.out;
    EXPECT_EQ(hashes.size(), 1u) << result.out;
  }
};

// Runs `scenario` (netlab JSON) with the collector steering under `policy` and the ranks placed
// h0,h0,h1,h1, the trainer's own flags in `train_flags`. Fails the test (fatally) where the run
// could not be made.
void runAdaptive(const std::string& name, const std::string& policy, const std::string& scenario,
                 const std::string& train_flags, std::chrono::seconds timeout, AdaptiveRun& run) {
  const std::string train = buildDir() + "/trainer/app/bpftrain-train";
  const std::string collector = buildDir() + "/collector/app/bpftrain-collector";
  const std::string sink = buildDir() + "/tests/tools/netlab-telemetry-sink";
  for (const std::string& b : {train, collector, sink})
    ASSERT_TRUE(std::filesystem::exists(b)) << b << " not built (cmake --build the whole tree)";

  std::random_device rd;
  const std::string prefix =
      "nla" + std::to_string(getpid() % 100000) + "x" + std::to_string(rd() % 1000) + "-";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / (prefix + name);
  std::filesystem::create_directories(dir);
  struct Cleanup {
    std::string prefix;
    std::filesystem::path dir;
    ~Cleanup() {
      if (std::filesystem::exists("/run/bpftrain-netlab/" + prefix))
        runCommand({netlabPath(), "down", "--prefix", prefix});
      std::filesystem::remove_all(dir);
    }
  } cleanup{prefix, dir};

  const std::string secret = dir / "secret";
  std::ofstream(secret) << "adaptive-netlab-test-secret-0123456789";
  std::filesystem::permissions(
      secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const std::string scenario_file = dir / "scenario.json";
  std::ofstream(scenario_file) << scenario;
  const std::string phases = dir / "phases.jsonl", decisions = dir / "decisions.jsonl";
  const std::string telemetry = dir / "telemetry.jsonl";
  // Inside `netlab run`: collector and telemetry sink in host0 (rank 0 listens for control on
  // 127.0.0.1:9472 there).
  const std::string script =
      "set -e; IFS=, read -ra NS <<<\"$NETLAB_NETNS\"; IFS=, read -ra AD <<<\"$NETLAB_ADDRS\"; "
      "ip netns exec ${NS[0]} " +
      collector + " --listen ${AD[0]}:9556 --metrics 127.0.0.1:0 --control --policy " + policy +
      " --trainer 127.0.0.1:9472 --secret " + secret + " --job e2e --decisions-log " + decisions +
      " & c=$!; "
      "ip netns exec ${NS[0]} " +
      sink + " ${AD[0]}:9555 --forward ${AD[0]}:9556 > " + telemetry +
      " & s=$!; trap 'kill $c $s 2>/dev/null; wait' EXIT; "
      "timeout --signal=TERM " +
      std::to_string(timeout.count() - 20) + " " + train +
      " --ranks 4 --netns ${NS[0]},${NS[0]},${NS[1]},${NS[1]} "
      "--node-of 0,0,1,1 --topology ring --adaptive --secret " +
      secret + " --job e2e --collector ${AD[0]}:9555 " + train_flags;
  run.result = runCommand({netlabPath(), "run", "--scenario", scenario_file, "--phase-log", phases,
                           "--prefix", prefix, "--", "bash", "-c", script},
                          timeout);
  ASSERT_EQ(run.result.status, 0) << run.result.out;
  EXPECT_TRUE(namespacesWithPrefix(prefix).empty());
  {
    std::ifstream in(phases);
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l);
      run.phase_ns[j["phase"].get<std::string>()] = j["wall_ns"].get<int64_t>();
    }
  }
  {
    std::ifstream in(telemetry);
    std::array<int, 4> now;
    now.fill(-1);
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l);
      if (!j.contains("rank") || !j.contains("topology")) continue;
      const int rank = j["rank"].get<int>();
      if (rank < 0 || rank >= 4) continue;
      now[size_t(rank)] = j["topology"].get<int>();
      const bool agree = std::all_of(now.begin(), now.end(), [&](int t) { return t == now[0]; });
      run.topologies.emplace_back(j["wall_ns"].get<int64_t>(), agree ? now[0] : -1);
    }
  }
  {
    std::ifstream in(decisions);
    run.decisions_text.assign(std::istreambuf_iterator<char>(in), {});
    std::istringstream lines(run.decisions_text);
    for (std::string l; std::getline(lines, l);)
      run.decisions_log.push_back(nlohmann::json::parse(l));
  }
}

TEST(AdaptiveNetlab, RulesSwitchToHierarchicalWhenIntraHostTrafficIsThrottled) {
  BPFTRAIN_REQUIRE_ROOT("network namespaces, tc");
  BPFTRAIN_REQUIRE_TOOL("jq");
  AdaptiveRun run;
  // 150 steps (~30-60 s here).
  runAdaptive("lo-throttle", "rules", R"({"name": "lo-throttle", "hosts": 2, "phases": [
      {"at": 0, "name": "clear"},
      {"at": 6, "name": "throttled", "shape": [{"host": "all", "link": "lo", "rate": "500mbit"}]}]})",
              "--model mlp:1024x4 --steps 150 --eval-every 1000", 120s, run);
  if (HasFatalFailure()) return;
  const int64_t throttled_ns = run.phase_ns["throttled"];
  ASSERT_GT(throttled_ns, 0) << run.result.out;
  // The first moment every rank reports hierarchical after the throttle, and from then on the
  // share of time every rank stays there. The way back (issue 9) re-probes the ring now and then
  // while the congestion lasts: such a trial may leave hierarchical for a few seconds, but only as
  // a `reprobe` decision, and the loop must spend most of the throttled phase where it is right.
  const int64_t all_hier_ns = run.allOn(kHierarchical, throttled_ns);
  ASSERT_GT(all_hier_ns, 0) << "never on hierarchical after the throttle; decisions:\n"
                            << run.decisions_text;
  int reprobes = 0;
  for (const nlohmann::json& j : run.decisions_log) {
    if (j.value("event", "") != "decision" || j["wall_ns"].get<int64_t>() < all_hier_ns) continue;
    const std::string from = j.value("from", ""), to = j.value("to", "");
    if (from.rfind("hierarchical", 0) == 0 && to.rfind("hierarchical", 0) != 0) {
      EXPECT_EQ(j.value("reason", ""), "reprobe") << "left hierarchical under congestion: " << j;
      ++reprobes;
    }
  }
  const int64_t last_ns = run.topologies.back().first;
  const double after_s = double(all_hier_ns - throttled_ns) * 1e-9;
  const double settled_s = double(last_ns - all_hier_ns) * 1e-9;
  const double share = run.shareAllOn(kHierarchical, all_hier_ns, last_ns);
  std::printf(
      "throttle -> every rank on hierarchical: %.2f s; then %.0f%% of %.1f s there, %d re-probes\n",
      after_s, 100 * share, settled_s, reprobes);
  EXPECT_LE(after_s, 10.0) << run.decisions_text;
  EXPECT_GE(share, 0.7) << run.decisions_text;
  // Budgeted: the first re-probe comes 8 s after the step up and each failed one doubles the wait.
  EXPECT_LE(reprobes, 1 + int(settled_s / 16)) << run.decisions_text;

  // Bucket syncs included (the throttled ring's buckets run long enough for them; how many is
  // printed, timing decides).
  std::smatch syncs;
  if (std::regex_search(run.result.out, syncs, std::regex("rank 0: bucket syncs (\\d+)")))
    std::printf("bucket syncs: %s\n", syncs[1].str().c_str());
  run.expectIdenticalParameters();
}

// host1's uplink at 2 Gbit/s from 25 s to 45 s, then lifted. The clear phase is as long as
// five-phase.json's: with the onset at 15 s the bandit once (1 run in 7) exploited
// hierarchical's start-up mean (not yet stale) as the onset began, its trial's first throttled
// reading was abandoned, and back on the ring, whose stint never read its links clear, no link
// change fired for the whole phase (fixed since, and covered by the unit test
// AnOnsetDuringALostTrialIsSeenOnTheIncumbentItReturnsTo). Measured on a quiet host
// (five-phase.json, f31a, 3 runs each): every rank on hierarchical 0.65-1.0 s after the onset, the
// diagnosis in under 1 s, back on the ring 1.3-1.6 s after the lift (a rise of hierarchical's
// samples/s; the re-probe timer, 8-16 s, where the rise is not seen). The deadlines leave room for
// a loaded CI host.
class AdaptiveNetlabUplink : public ::testing::TestWithParam<const char*> {};

TEST_P(AdaptiveNetlabUplink, HierarchicalAfterTheOnsetTheLinkDiagnosedAndTheRingAfterTheLift) {
  BPFTRAIN_REQUIRE_ROOT("network namespaces, tc");
  BPFTRAIN_REQUIRE_TOOL("jq");
  const std::string policy = GetParam();
  AdaptiveRun run;
  runAdaptive("uplink-" + policy, policy, R"({"name": "uplink", "hosts": 2, "phases": [
      {"at": 0, "name": "clear"},
      {"at": 25, "name": "uplink", "shape": [{"host": 1, "link": "uplink", "rate": "2gbit"}]},
      {"at": 45, "name": "clear-again", "shape": [{"host": 1, "link": "uplink", "rate": "off"}]}]})",
              "--model mlp:2048x4 --batch 32 --metrics-hz 10 --duration 68 --steps 1000000 "
              "--eval-every 1000000",
              110s, run);
  if (HasFatalFailure()) return;
  const int64_t onset_ns = run.phase_ns["uplink"], lift_ns = run.phase_ns["clear-again"];
  ASSERT_GT(onset_ns, 0) << run.result.out;
  ASSERT_GT(lift_ns, 0) << run.result.out;
  ASSERT_GT(run.topologies.back().first, lift_ns + 18'000'000'000) << "the run ended early";

  // The rules climb to hierarchical on the links' signals. The bandit moves off the throttled
  // ring to whichever arm it measures faster: on a slower host (the ring at 370-490 samples/s
  // clear, against 550-640 earlier the same night) halving-doubling read 314 in the uplink phase
  // against hierarchical's 267-289, with the bandit as it landed before this session too (749514d:
  // 20% of the phase on hierarchical). So for the bandit the onset is met on either, and the way
  // back is to a flat topology, the ring or halving-doubling (in a clean-clone CI rehearsal it
  // kept halving-doubling after the lift at 684 against the ring's 591-613).
  const bool bandit = policy == "bandit";
  const std::vector<int> climbed =
      bandit ? std::vector<int>{kHierarchical, kHalvingDoubling} : std::vector<int>{kHierarchical};
  const std::vector<int> way_back =
      bandit ? std::vector<int>{kRing, kHalvingDoubling} : std::vector<int>{kRing};
  const AdaptiveRun::PhaseVerdict v =
      run.judge(onset_ns, lift_ns, run.topologies.back().first, climbed, way_back, "other_host");
  std::printf(
      "%s: onset -> every rank on %s %.2f s (then %.0f%% of the phase there), "
      "inter-host link diagnosed %.2f s; lift -> every rank on %s %.2f s (then %.0f%% "
      "there)\n",
      policy.c_str(), bandit ? "hierarchical or halving-doubling" : "hierarchical", v.onset_s,
      100 * v.share_climbed, v.diagnosis_s, bandit ? "a flat topology" : "the ring", v.back_s,
      100 * v.share_back);
  ASSERT_GE(v.onset_s, 0) << "never off the ring after the onset; decisions:\n"
                          << run.decisions_text;
  EXPECT_LE(v.onset_s, 6.0) << run.decisions_text;
  EXPECT_GE(v.diagnosis_s, 0) << "the inter-host link never diagnosed:\n" << run.decisions_text;
  EXPECT_LE(v.diagnosis_s, 6.0) << run.decisions_text;
  // Re-probes of the ring and trials may leave hierarchical for a few seconds each.
  EXPECT_GE(v.share_climbed, 0.6) << run.decisions_text;
  EXPECT_GE(v.back_s, 0) << "never back after the lift:\n" << run.decisions_text;
  EXPECT_LE(v.back_s, 20.0) << run.decisions_text;
  EXPECT_GE(v.share_back, 0.7) << run.decisions_text;
  run.expectIdenticalParameters();
}

INSTANTIATE_TEST_SUITE_P(Policies, AdaptiveNetlabUplink, ::testing::Values("rules", "bandit"),
                         [](const auto& info) { return std::string(info.param); });

// The other order, and every uplink at once: the uplinks of both hosts throttled to 2 Gbit/s,
// lifted, then lo throttled inside both hosts, lifted, under the rules (the default policy; the
// bandit meets an uplink above and both orders in its simulations). Each congestion is met on
// hierarchical with its link diagnosed, and each lift on the ring again: after the uplinks' by a
// rise of hierarchical's throughput or the re-probe timer (8 s, then 16), after lo's by the ring
// probe.
TEST(AdaptiveNetlab, RulesEveryUplinkThenInsideTheHostsEachLifted) {
  BPFTRAIN_REQUIRE_ROOT("network namespaces, tc");
  BPFTRAIN_REQUIRE_TOOL("jq");
  AdaptiveRun run;
  runAdaptive("uplinks-then-lo", "rules", R"({"name": "uplinks-then-lo", "hosts": 2, "phases": [
      {"at": 0, "name": "clear"},
      {"at": 12, "name": "uplinks", "shape": [{"host": "all", "link": "uplink", "rate": "2gbit"}]},
      {"at": 27, "name": "clear-again", "shape": [{"host": "all", "link": "uplink", "rate": "off"}]},
      {"at": 47, "name": "intra-host", "shape": [{"host": "all", "link": "lo", "rate": "500mbit"}]},
      {"at": 62, "name": "clear-last", "shape": [{"host": "all", "link": "lo", "rate": "off"}]}]})",
              "--model mlp:2048x4 --batch 32 --metrics-hz 10 --duration 76 --steps 1000000 "
              "--eval-every 1000000",
              120s, run);
  if (HasFatalFailure()) return;
  const int64_t uplinks_ns = run.phase_ns["uplinks"], clear_ns = run.phase_ns["clear-again"];
  const int64_t lo_ns = run.phase_ns["intra-host"], last_ns = run.phase_ns["clear-last"];
  ASSERT_TRUE(uplinks_ns > 0 && clear_ns > 0 && lo_ns > 0 && last_ns > 0) << run.result.out;
  ASSERT_GT(run.topologies.back().first, last_ns + 10'000'000'000) << "the run ended early";
  const AdaptiveRun::PhaseVerdict up =
      run.judge(uplinks_ns, clear_ns, lo_ns, {kHierarchical}, {kRing}, "other_host");
  const AdaptiveRun::PhaseVerdict lo =
      run.judge(lo_ns, last_ns, run.topologies.back().first, {kHierarchical}, {kRing}, "same_host");
  for (const auto& [name, v] : {std::pair{"uplinks", up}, std::pair{"lo", lo}}) {
    std::printf(
        "%s: onset -> every rank on hierarchical %.2f s (then %.0f%% of the phase there), link "
        "diagnosed %.2f s; lift -> every rank on the ring %.2f s (then %.0f%% there)\n",
        name, v.onset_s, 100 * v.share_climbed, v.diagnosis_s, v.back_s, 100 * v.share_back);
    SCOPED_TRACE(name);
    EXPECT_GE(v.onset_s, 0) << run.decisions_text;
    EXPECT_LE(v.onset_s, 6.0) << run.decisions_text;
    EXPECT_GE(v.diagnosis_s, 0) << run.decisions_text;
    EXPECT_LE(v.diagnosis_s, 6.0) << run.decisions_text;
    EXPECT_GE(v.share_climbed, 0.6) << run.decisions_text;
    EXPECT_GE(v.back_s, 0) << run.decisions_text;
    EXPECT_GE(v.share_back, 0.6) << run.decisions_text;
  }
  EXPECT_LE(up.back_s, 18.0) << run.decisions_text;
  EXPECT_LE(lo.back_s, 10.0) << run.decisions_text;
  run.expectIdenticalParameters();
}

}  // namespace
}  // namespace bpftrain::tools::testing
