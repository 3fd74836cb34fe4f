// The closed loop in netlab (root, e2e): 4 ranks of bpftrain-train as 2 hosts x 2, adaptive,
// steered by bpftrain-collector --control (ingest, windows, BPF probes, ControllerService) with
// the rules policy and the BPF transport probes (RTT jitter). Intra-host TCP is throttled (TBF on
// lo in both hosts) 6 s in: the flat ring's bus bandwidth collapses and the controller must have
// every rank on the hierarchical topology (whose node stage uses shared memory) within the
// deadline and stay there but for budgeted re-probes of the ring; at the end every rank's
// parameter hash is identical. The lab and every process are
// removed even when an assertion fails.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <set>
#include <sstream>

#include "tests/support/requirements.h"
#include "tests/tools/netlab_util.h"

namespace bpftrain::tools::testing {
namespace {

using namespace std::chrono_literals;

std::string buildDir() {
  const char* b = std::getenv("BPFTRAIN_BUILD_DIR");
  return b != nullptr ? b : ".";
}

TEST(AdaptiveNetlab, RulesSwitchToHierarchicalWhenIntraHostTrafficIsThrottled) {
  BPFTRAIN_REQUIRE_ROOT("network namespaces, tc");
  const std::string train = buildDir() + "/trainer/app/bpftrain-train";
  const std::string collector = buildDir() + "/collector/app/bpftrain-collector";
  const std::string sink = buildDir() + "/tests/tools/netlab-telemetry-sink";
  for (const std::string& b : {train, collector, sink})
    ASSERT_TRUE(std::filesystem::exists(b)) << b << " not built (cmake --build the whole tree)";
  BPFTRAIN_REQUIRE_TOOL("jq");

  std::random_device rd;
  const std::string prefix =
      "nla" + std::to_string(getpid() % 100000) + "x" + std::to_string(rd() % 1000) + "-";
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / (prefix + "adaptive");
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
  const std::string scenario = dir / "scenario.json";
  std::ofstream(scenario) << R"({"name": "lo-throttle", "hosts": 2, "phases": [
      {"at": 0, "name": "clear"},
      {"at": 6, "name": "throttled", "shape": [{"host": "all", "link": "lo", "rate": "500mbit"}]}]})";
  const std::string phases = dir / "phases.jsonl", decisions = dir / "decisions.jsonl";
  const std::string telemetry = dir / "telemetry.jsonl";
  // Inside `netlab run`: collector and telemetry sink in host0 (rank 0 listens for control on
  // 127.0.0.1:9472 there), ranks placed h0,h0,h1,h1; 150 steps (~30-60 s here).
  const std::string script =
      "set -e; IFS=, read -ra NS <<<\"$NETLAB_NETNS\"; IFS=, read -ra AD <<<\"$NETLAB_ADDRS\"; "
      "ip netns exec ${NS[0]} " +
      collector +
      " --listen ${AD[0]}:9556 --metrics 127.0.0.1:0 --control "
      "--policy rules --trainer 127.0.0.1:9472 --secret " +
      secret + " --job e2e --decisions-log " + decisions +
      " & c=$!; "
      "ip netns exec ${NS[0]} " +
      sink + " ${AD[0]}:9555 --forward ${AD[0]}:9556 > " + telemetry +
      " & s=$!; trap 'kill $c $s 2>/dev/null; wait' EXIT; "
      "timeout --signal=TERM 100 " +
      train +
      " --ranks 4 --netns ${NS[0]},${NS[0]},${NS[1]},${NS[1]} "
      "--node-of 0,0,1,1 --topology ring --adaptive --secret " +
      secret +
      " --job e2e "
      "--collector ${AD[0]}:9555 --model mlp:1024x4 --steps 150 --eval-every 1000";
  CommandResult r = runCommand({netlabPath(), "run", "--scenario", scenario, "--phase-log", phases,
                                "--prefix", prefix, "--", "bash", "-c", script},
                               std::chrono::seconds(120));
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(namespacesWithPrefix(prefix).empty());

  // When the throttle began, and when every rank first reported hierarchical after it.
  int64_t throttled_ns = 0;
  {
    std::ifstream in(phases);
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l);
      if (j["phase"] == "throttled") throttled_ns = j["wall_ns"].get<int64_t>();
    }
  }
  ASSERT_GT(throttled_ns, 0) << r.out;
  // The first moment every rank reports hierarchical after the throttle, and from then on the
  // share of time every rank stays there. The way back (issue 9) re-probes the ring now and then
  // while the congestion lasts: such a trial may leave hierarchical for a few seconds, but only as
  // a `reprobe` decision, and the loop must spend most of the throttled phase where it is right.
  std::map<int, int> topo_now;
  int64_t all_hier_ns = 0, last_ns = 0, on_hier_ns = 0, prev_ns = 0;
  bool prev_all = false;
  {
    std::ifstream in(telemetry);
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l);
      if (!j.contains("rank") || !j.contains("topology")) continue;
      topo_now[j["rank"].get<int>()] = j["topology"].get<int>();
      int64_t t = j["wall_ns"].get<int64_t>();
      bool all = topo_now.size() == 4;
      for (auto& [rank, topo] : topo_now) all = all && topo == 3;  // Topology::kHierarchical
      if (all_hier_ns != 0 && prev_all) on_hier_ns += t - prev_ns;
      if (all && t >= throttled_ns && all_hier_ns == 0) all_hier_ns = t;
      prev_all = all;
      prev_ns = t;
      last_ns = t;
    }
  }
  std::string log;
  int reprobes = 0;
  {
    std::ifstream in(decisions);
    log.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_GT(all_hier_ns, 0) << "never on hierarchical after the throttle; decisions:\n" << log;
  {
    std::istringstream in(log);
    for (std::string l; std::getline(in, l);) {
      auto j = nlohmann::json::parse(l);
      if (j.value("event", "") != "decision" || j["wall_ns"].get<int64_t>() < all_hier_ns) continue;
      const std::string from = j.value("from", ""), to = j.value("to", "");
      if (from.rfind("hierarchical", 0) == 0 && to.rfind("hierarchical", 0) != 0) {
        EXPECT_EQ(j.value("reason", ""), "reprobe") << "left hierarchical under congestion: " << l;
        ++reprobes;
      }
    }
  }
  double after_s = double(all_hier_ns - throttled_ns) * 1e-9;
  double settled_s = double(last_ns - all_hier_ns) * 1e-9;
  double share = settled_s > 0 ? double(on_hier_ns) * 1e-9 / settled_s : 1.0;
  std::printf(
      "throttle -> every rank on hierarchical: %.2f s; then %.0f%% of %.1f s there, %d re-probes\n",
      after_s, 100 * share, settled_s, reprobes);
  EXPECT_LE(after_s, 10.0) << log;
  EXPECT_GE(share, 0.7) << log;
  // Budgeted: the first re-probe comes 8 s after the step up and each failed one doubles the wait.
  EXPECT_LE(reprobes, 1 + int(settled_s / 16)) << log;

  // Parameters bit-identical across ranks after the live switches, bucket syncs included (the
  // throttled ring's buckets run long enough for them; how many is printed, timing decides).
  std::smatch syncs;
  if (std::regex_search(r.out, syncs, std::regex("rank 0: bucket syncs (\\d+)")))
    std::printf("bucket syncs: %s\n", syncs[1].str().c_str());
  std::regex hash_re("rank (\\d+): final .* params_hash (0x[0-9a-f]+)");
  std::set<std::string> hashes;
  int ranks = 0;
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), hash_re), end; it != end; ++it) {
    hashes.insert((*it)[2]);
    ++ranks;
  }
  EXPECT_EQ(ranks, 4) << r.out;
  EXPECT_EQ(hashes.size(), 1u) << r.out;
}

}  // namespace
}  // namespace bpftrain::tools::testing
