// tools/netlab end to end (root): hosts reach each other across the bridge, TBF limits a TCP
// transfer and lifting it restores the rate, `run` plays a scenario, passes the command's exit
// status, and removes everything on exit and on SIGTERM; `down` leaves alone what netlab did not
// create. Every test removes its lab in TearDown, so a failed assertion leaves nothing behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>

#include "tests/support/requirements.h"
#include "tests/tools/netlab_util.h"

namespace bpftrain::tools::testing {
namespace {

using namespace std::chrono_literals;

class NetlabTest : public ::testing::Test {
 protected:
  void SetUp() override {
    BPFTRAIN_REQUIRE_ROOT("network namespaces, tc");
    BPFTRAIN_REQUIRE_TOOL("ip");
    if (runCommand({"ip", "netns", "list"}).status != 0)
      BPFTRAIN_SKIP_OR_FAIL_UNDER_CI("`ip netns list` fails here: network namespaces not usable");
    std::random_device rd;
    prefix_ = "nlt" + std::to_string(getpid() % 100000) + "x" + std::to_string(rd() % 1000) + "-";
  }
  void TearDown() override {
    if (prefix_.empty()) return;
    if (std::filesystem::exists("/run/bpftrain-netlab/" + prefix_))
      runCommand({netlabPath(), "down", "--prefix", prefix_});
    // Namespaces a test made by hand under the prefix (never netlab's: those are gone above).
    for (const std::string& ns : namespacesWithPrefix(prefix_))
      runCommand({"ip", "netns", "del", ns});
    EXPECT_TRUE(namespacesWithPrefix(prefix_).empty());
  }
  std::string up(int hosts) {
    CommandResult r = runCommand({netlabPath(), "up", "--hosts", std::to_string(hosts), "--prefix",
                                  prefix_, "--subnet", subnet_});
    EXPECT_EQ(r.status, 0) << r.out;
    return r.out;
  }
  std::string host(int i) const { return prefix_ + "host" + std::to_string(i); }
  std::string addr(int i) const { return subnet_ + "." + std::to_string(i + 1); }

  std::string prefix_;
  std::string subnet_ = "10.213.250";
};

TEST_F(NetlabTest, HostsReachEachOtherAcrossTheBridgeAndDownRemovesEverything) {
  up(3);
  auto ns = namespacesWithPrefix(prefix_);
  EXPECT_EQ(ns.size(), 4u);  // three hosts and the bridge
  EXPECT_TRUE(tcpEcho(host(0), host(2), addr(2)));
  EXPECT_TRUE(tcpEcho(host(2), host(1), addr(1)));
  EXPECT_TRUE(tcpEcho(host(1), host(0), addr(0)));
  // Bridge netfilter is off in the bridge's namespace.
  CommandResult nf = runCommand({"ip", "netns", "exec", prefix_ + "br", "cat",
                                 "/proc/sys/net/bridge/bridge-nf-call-iptables"});
  if (nf.status == 0) {
    EXPECT_EQ(nf.out, "0\n");
  }
  // Nothing in the root namespace.
  CommandResult links = runCommand({"ip", "-o", "link", "show"});
  EXPECT_EQ(links.out.find(prefix_), std::string::npos);

  CommandResult down = runCommand({netlabPath(), "down", "--prefix", prefix_});
  EXPECT_EQ(down.status, 0) << down.out;
  EXPECT_TRUE(namespacesWithPrefix(prefix_).empty());
  EXPECT_FALSE(std::filesystem::exists("/run/bpftrain-netlab/" + prefix_));
}

TEST_F(NetlabTest, TbfLimitsATcpTransferAndLiftingItRestoresTheRate) {
  up(2);
  double before = tcpRateMbps(host(1), host(0), addr(0), 1.0);
  ASSERT_GT(before, 0);
  // Well under the unshaped rate, so that the limit is what we measure.
  int limit_mbit = before > 2000 ? 500 : int(before / 4);
  ASSERT_GT(limit_mbit, 10) << "unshaped rate too low to test shaping: " << before << " Mbit/s";
  CommandResult s = runCommand({netlabPath(), "shape", "--prefix", prefix_, "1", "uplink",
                                std::to_string(limit_mbit) + "mbit"});
  ASSERT_EQ(s.status, 0) << s.out;
  double up_shaped = tcpRateMbps(host(1), host(0), addr(0), 2.0);    // host1's egress
  double down_shaped = tcpRateMbps(host(0), host(1), addr(1), 2.0);  // into host1 (bridge side)
  s = runCommand({netlabPath(), "shape", "--prefix", prefix_, "1", "uplink", "off"});
  ASSERT_EQ(s.status, 0) << s.out;
  double after = tcpRateMbps(host(1), host(0), addr(0), 1.0);
  std::printf(
      "tcp host1->host0: unshaped %.0f Mbit/s | tbf %d mbit: up %.0f, down %.0f | lifted %.0f\n",
      before, limit_mbit, up_shaped, down_shaped, after);
  EXPECT_LE(up_shaped, limit_mbit * 1.10);
  EXPECT_GE(up_shaped, limit_mbit * 0.5);
  EXPECT_LE(down_shaped, limit_mbit * 1.10);
  EXPECT_GE(down_shaped, limit_mbit * 0.5);
  EXPECT_GE(after, 2.0 * up_shaped);
}

TEST_F(NetlabTest, RunPlaysTheScenarioAndCleansUpOnSigterm) {
  BPFTRAIN_REQUIRE_TOOL("jq");
  std::string dir = std::filesystem::temp_directory_path() / (prefix_ + "run");
  std::filesystem::create_directories(dir);
  std::string scenario = dir + "/s.json", phases = dir + "/phases.jsonl";
  std::ofstream(scenario) << R"({"name": "t", "hosts": 2, "phases": [
      {"at": 0, "name": "clear"},
      {"at": 0.5, "name": "throttled", "shape": [{"host": 1, "link": "uplink", "rate": "2gbit"}]},
      {"at": 1.0, "name": "lo", "shape": [{"host": "all", "link": "lo", "rate": "1gbit"}]}]})";
  // The command waits (with a deadline) until host1's uplink carries the TBF, says so, and then
  // stays until it is killed.
  std::string script =
      "echo pid $$; ns1=${NETLAB_NETNS#*,}; "
      "for i in $(seq 100); do tc -n $ns1 qdisc show dev $NETLAB_IFACE | grep -q tbf && "
      "tc -n ${NETLAB_NETNS%%,*} qdisc show dev lo | grep -q tbf && { echo SHAPED; break; }; "
      "sleep 0.1; done; exec sleep 120";
  Child run({netlabPath(), "run", "--scenario", scenario, "--phase-log", phases, "--prefix",
             prefix_, "--", "bash", "-c", script});
  ASSERT_TRUE(run.waitForLine("SHAPED", 20s)) << run.output();
  EXPECT_EQ(namespacesWithPrefix(prefix_).size(), 3u);
  // netlab logs a phase once its shapes are on, so the command can see the last shape a moment
  // before its line is written (a CI rehearsal read 2 lines): wait for the line, with a deadline.
  const auto phaseLines = [&] {
    std::ifstream in(phases);
    return std::count(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>(), '\n');
  };
  for (const auto deadline = std::chrono::steady_clock::now() + 10s;
       phaseLines() < 3 && std::chrono::steady_clock::now() < deadline;)
    std::this_thread::sleep_for(20ms);
  pid_t cmd = 0;
  {
    auto p = run.output().find("pid ");
    ASSERT_NE(p, std::string::npos);
    cmd = pid_t(std::stoi(run.output().substr(p + 4)));
  }
  ASSERT_EQ(kill(run.pid(), SIGTERM), 0);
  std::optional<int> st = run.wait(20s);
  ASSERT_TRUE(st) << run.output();
  EXPECT_EQ(*st, 143);
  EXPECT_TRUE(namespacesWithPrefix(prefix_).empty()) << run.output();
  EXPECT_FALSE(processAlive(cmd)) << "the command outlived netlab run";
  std::ifstream in(phases);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[1].find("\"throttled\""), std::string::npos);
  std::filesystem::remove_all(dir);
}

TEST_F(NetlabTest, RunReturnsTheCommandsExitStatusAndCleansUp) {
  BPFTRAIN_REQUIRE_TOOL("jq");
  CommandResult r =
      runCommand({netlabPath(), "run", "--hosts", "2", "--prefix", prefix_, "--", "bash", "-c",
                  "ip netns exec ${NETLAB_NETNS%%,*} ip -br addr show $NETLAB_IFACE && exit 7"});
  EXPECT_EQ(r.status, 7) << r.out;
  EXPECT_NE(r.out.find(subnet_.substr(0, 3)), std::string::npos) << r.out;
  EXPECT_TRUE(namespacesWithPrefix(prefix_).empty());
}

TEST_F(NetlabTest, LeavesAloneWhatItDidNotCreate) {
  // A namespace that looks like one of ours but was made by someone else.
  ASSERT_EQ(runCommand({"ip", "netns", "add", host(0)}).status, 0);
  CommandResult down = runCommand({netlabPath(), "down", "--prefix", prefix_});
  EXPECT_NE(down.status, 0);
  EXPECT_NE(down.out.find("no netlab with prefix"), std::string::npos) << down.out;
  CommandResult upr = runCommand({netlabPath(), "up", "--hosts", "1", "--prefix", prefix_});
  EXPECT_NE(upr.status, 0);
  EXPECT_NE(upr.out.find("not ours"), std::string::npos) << upr.out;
  EXPECT_EQ(namespacesWithPrefix(prefix_), std::vector<std::string>{host(0)});
}

}  // namespace
}  // namespace bpftrain::tools::testing
