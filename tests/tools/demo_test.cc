// Smoke test of tools/demo, the main job (e2e): a ~30 s scenario in netlab as root (collector with
// probes and the controller, 4-rank adaptive training, summary), and the degraded mode of a user
// without root (loopback, no probes). Both must finish with every rank's parameters identical,
// print the summary's parts, and leave no process, namespace or netlab state behind.
#include <gtest/gtest.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/support/requirements.h"
#include "tests/support/temp_dir.h"
#include "tests/tools/netlab_util.h"

namespace bpftrain::tools::testing {
namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

std::string buildDir() {
  const char* b = std::getenv("BPFTRAIN_BUILD_DIR");
  return b != nullptr ? b : ".";
}

std::string readFile(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Processes still running one of the demo's binaries for job "demo" (argv split on NULs).
std::vector<std::string> leftoverDemoProcesses() {
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string pid = e.path().filename();
    if (pid.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string cmd = readFile(e.path() / "cmdline");
    const bool ours = cmd.find("bpftrain-collector") != std::string::npos ||
                      cmd.find("bpftrain-train") != std::string::npos;
    if (ours && cmd.find(std::string("--job\0demo\0", 11)) != std::string::npos) {
      std::replace(cmd.begin(), cmd.end(), '\0', ' ');
      left.push_back(pid + ": " + cmd);
    }
  }
  return left;
}

// What an unprivileged run of tools/demo reads, copied under `to` (world-readable): the script,
// its default scenario, the two binaries (as <to>/build/...) and the digits data. The checkout
// itself may sit under a directory other users cannot enter (a 0700 home, say).
void stageDemoFor(const fs::path& to) {
  const fs::path src = sourceDir(), build = buildDir();
  const std::pair<fs::path, fs::path> files[] = {
      {src / "tools/demo", to / "tools/demo"},
      {src / "tools/netlab.d/demo.json", to / "tools/netlab.d/demo.json"},
      {build / "collector/app/bpftrain-collector", to / "build/collector/app/bpftrain-collector"},
      {build / "trainer/app/bpftrain-train", to / "build/trainer/app/bpftrain-train"},
      {src / "data/digits.csv.gz", to / "data/digits.csv.gz"}};
  for (const auto& [from, dest] : files) {
    fs::create_directories(dest.parent_path());
    fs::copy_file(from, dest, fs::copy_options::overwrite_existing);
  }
  for (fs::recursive_directory_iterator it(to), end; it != end; ++it) {
    const bool dir = it->is_directory();
    fs::permissions(it->path(),
                    dir ? fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                              fs::perms::others_read | fs::perms::others_exec
                        : fs::perms::others_read | fs::perms::group_read,
                    dir ? fs::perm_options::replace : fs::perm_options::add);
  }
}

void expectSummary(const std::string& out) {
  EXPECT_NE(out.find("== bpftrain demo summary"), std::string::npos) << out;
  EXPECT_TRUE(
      std::regex_search(out, std::regex(R"(test accuracy \(rank 0.*\): 0\.\d+ after \d+ steps)")))
      << out;
  EXPECT_NE(out.find("parameters: identical on all 4 ranks"), std::string::npos) << out;
  EXPECT_NE(out.find("samples/s per phase"), std::string::npos) << out;
  EXPECT_NE(out.find("/metrics was at http://"), std::string::npos) << out;
  EXPECT_EQ(out.find("FAILED"), std::string::npos) << out;
}

TEST(Demo, NetlabScenarioWithProbesAndController) {
  bpftrain::testing::TempDir tmp("demo-test");
  ASSERT_FALSE(tmp.path().empty());
  const fs::path dir = tmp.path();
  BPFTRAIN_REQUIRE_ROOT("netlab namespaces, tc, BPF (the loopback case covers non-root)");
  BPFTRAIN_REQUIRE_TOOL("jq");
  const fs::path scenario = dir / "scenario.json";
  // 12 s clear (start-up takes 4-10 s of it on a loaded machine), 14 s of intra-host TCP
  // congestion (the controller's rules switch to hierarchical in ~1-3 s), 8 s clear again.
  std::ofstream(scenario) << R"({"name": "demo-smoke", "hosts": 2, "end": 34, "phases": [
      {"at": 0, "name": "clear"},
      {"at": 12, "name": "congested", "shape": [{"host": "all", "link": "lo", "rate": "500mbit"}]},
      {"at": 26, "name": "clear-again", "shape": [{"host": "all", "link": "lo", "rate": "off"}]}]})";
  const fs::path results = dir / "results";
  CommandResult r =
      runCommand({"env", "BUILD_DIR=" + buildDir(), "DEMO_SCENARIO=" + scenario.string(),
                  "DEMO_OUT=" + results.string(), sourceDir() + "/tools/demo"},
                 170s);
  EXPECT_EQ(r.status, 0) << r.out;
  expectSummary(r.out);
  // Every phase has a row; the congested one has measured rates and ran hierarchical (the
  // controller moved the ranks there, in that phase or earlier).
  for (const char* phase : {"clear", "congested", "clear-again"})
    EXPECT_TRUE(
        std::regex_search(r.out, std::regex(std::string("\n  ") + phase + R"( +\d+\.\.\d+ )")))
        << "no row for phase " << phase << "\n"
        << r.out;
  EXPECT_TRUE(std::regex_search(
      r.out, std::regex(R"(\n  congested +\d+\.\.\d+ +\d+ +\d+  .*hierarchical)")))
      << r.out;
  EXPECT_NE(r.out.find("controller decisions ("), std::string::npos) << r.out;
  EXPECT_TRUE(fs::exists(results / "decisions.jsonl"));
  // Probes were loaded (as root on this kernel): at least one is up.
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  up: \S+)"))) << r.out;
  // The metrics samples hold the series the summary is built from.
  const std::string samples = readFile(results / "metrics.samples");
  for (const char* series : {"bpftrain_samples_per_second{", "bpftrain_topology_info{",
                             "bpftrain_config_epoch{", "bpftrain_probe_up{"})
    EXPECT_NE(samples.find(series), std::string::npos) << series;

  // Nothing left: the lab's namespaces and state, and the demo's processes.
  std::smatch m;
  const std::string netlab_log = readFile(results / "netlab.log");
  ASSERT_TRUE(std::regex_search(netlab_log, m, std::regex(R"(prefix (\S+),)"))) << netlab_log;
  const std::string prefix = m[1];
  EXPECT_FALSE(fs::exists("/run/bpftrain-netlab/" + prefix));
  EXPECT_EQ(namespacesWithPrefix(prefix), std::vector<std::string>{});
  EXPECT_EQ(leftoverDemoProcesses(), std::vector<std::string>{});
}

TEST(Demo, WithoutRootRunsOnLoopbackWithoutProbes) {
  bpftrain::testing::TempDir tmp("demo-test");
  ASSERT_FALSE(tmp.path().empty());
  const fs::path dir = tmp.path();
  const fs::path results = dir / "results";
  std::vector<std::string> argv{"env", "DEMO_NO_BUILD=1", "DEMO_SECONDS=15",
                                "DEMO_OUT=" + results.string()};
  if (geteuid() == 0) {
    // Run it as nobody, as a user without root would, from a copy nobody can read.
    if (runCommand({"runuser", "-u", "nobody", "--", "true"}).status != 0)
      BPFTRAIN_SKIP_OR_FAIL_UNDER_CI(
          "cannot run as nobody (runuser): the degraded mode needs a non-root user");
    ASSERT_NO_THROW(stageDemoFor(dir / "stage"));
    fs::permissions(dir, fs::perms::all);
    argv.insert(argv.end(), {"BUILD_DIR=" + (dir / "stage/build").string(),
                             "BPFTRAIN_DATA=" + (dir / "stage/data/digits.csv.gz").string(),
                             (dir / "stage/tools/demo").string()});
    argv.insert(argv.begin(), {"runuser", "-u", "nobody", "--"});
  } else {
    argv.insert(argv.end(), {"BUILD_DIR=" + buildDir(), sourceDir() + "/tools/demo"});
  }
  CommandResult r = runCommand(argv, 90s);
  EXPECT_EQ(r.status, 0) << r.out;
  expectSummary(r.out);
  EXPECT_NE(r.out.find("netlab: off (not root"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("probes: off (not root"), std::string::npos) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  loopback +\d+\.\.\d+ +\d+ )"))) << r.out;
  EXPECT_EQ(leftoverDemoProcesses(), std::vector<std::string>{});
}

}  // namespace
}  // namespace bpftrain::tools::testing
