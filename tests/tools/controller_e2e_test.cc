// The real bpftrain-collector (--control) and bpftrain-train in netlab (root, e2e): 2 hosts x 2
// ranks, the collector inside host0 (ranks send telemetry to host0's address, rank 0's control
// port is 127.0.0.1:9472 in host0).
//  - 60 s of unshaped steady state with the rules controller acting and the BPF probes on: no
//    topology switch; at most one (one-way) pinning move, counted alike in the decisions log,
//    bpftrain_controller_decisions_total and every rank's epoch; identical parameters.
//  - The collector SIGKILLed mid-run: training goes on with the configuration it had and every
//    rank finishes with the same parameters.
//  - A forged (wrong secret) and a replayed control frame sent to rank 0's control port during a
//    run: both rejected and counted by reason in rank 0's summary; the topology stays the one the
//    genuine decision set.
// Every test removes its lab and kills its processes (whole process groups) even on failure.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/clock.h"
#include "common/training_config.h"
#include "common/wire_format.h"
#include "tests/support/child_process.h"
#include "tests/support/requirements.h"
#include "tests/support/signed_control.h"
#include "tests/tools/netlab_util.h"

namespace bpftrain::tools::testing {
namespace {

using namespace std::chrono_literals;
using bpftrain::testing::buildPath;
using bpftrain::testing::ChildProcess;

constexpr const char* kJob = "ctl-e2e";
constexpr const char* kSecret = "controller-e2e-test-secret-0123456789abcdef";

// Runs fn on a thread that entered network namespace `ns` (namespaces are per thread); false
// when the namespace could not be entered.
bool inNetns(const std::string& ns, const std::function<void()>& fn) {
  bool entered = false;
  std::thread t([&] {
    int fd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    entered = setns(fd, CLONE_NEWNET) == 0;
    close(fd);
    if (entered) fn();
  });
  t.join();
  return entered;
}

// A kControl frame as the controller builds it (tests/support/signed_control.h); the frame's
// sequence is the epoch.
std::vector<uint8_t> controlFrame(uint64_t epoch, Topology topology, PinMode pinning,
                                  std::string_view secret) {
  return ::bpftrain::testing::signedControlFrame(kJob, epoch, uint8_t(topology), uint8_t(pinning),
                                                 realtimeNowNs(), secret, /*sender_id=*/7);
}

// Sends `frame` to 127.0.0.1:port from inside namespace `ns`.
bool sendUdp(const std::string& ns, int port, const std::vector<uint8_t>& frame) {
  bool sent = false;
  bool entered = inNetns(ns, [&] {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(uint16_t(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sent = sendto(fd, frame.data(), frame.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof a) ==
           ssize_t(frame.size());
    close(fd);
  });
  return entered && sent;
}

// /metrics of the collector at host:port inside namespace `ns`.
std::map<std::string, double> scrapeIn(const std::string& ns, const std::string& host, int port) {
  std::map<std::string, double> m;
  inNetns(ns, [&] { m = bpftrain::testing::parseMetrics(bpftrain::testing::httpGet(host, port)); });
  return m;
}

// Sum of every series of `name` (any labels).
double sumOf(const std::map<std::string, double>& m, const std::string& name) {
  double s = 0;
  for (const auto& [k, v] : m)
    if (k == name || k.rfind(name + "{", 0) == 0) s += v;
  return s;
}

struct FinalLine {
  int rank;
  uint64_t step;
  uint64_t epoch;
  std::string topology, pinning, hash;
};
std::vector<FinalLine> finalLines(const std::string& out) {
  static const std::regex re(
      "rank (\\d+): final step (\\d+) .* epoch (\\d+) topology (\\S+) pinning (\\S+) params_hash "
      "(0x[0-9a-f]+)");
  std::vector<FinalLine> v;
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    v.push_back({std::stoi((*it)[1]), std::stoull((*it)[2]), std::stoull((*it)[3]), (*it)[4],
                 (*it)[5], (*it)[6]});
  return v;
}

class ControllerE2e : public ::testing::Test {
 protected:
  void SetUp() override {
    BPFTRAIN_REQUIRE_ROOT("network namespaces, tc");
    for (const std::string& b : {collector_, train_})
      ASSERT_TRUE(std::filesystem::exists(b))
          << b << " not built: cmake --build BUILD --target bpftrain-collector bpftrain-train";
    std::random_device rd;
    prefix_ = "nce" + std::to_string(getpid() % 100000) + "x" + std::to_string(rd() % 1000) + "-";
    subnet_ = "10.214." + std::to_string(rd() % 250);
    dir_ = std::filesystem::temp_directory_path() / (prefix_ + "ctl");
    std::filesystem::create_directories(dir_);
    secret_ = dir_ / "secret";
    std::ofstream(secret_) << kSecret;
    std::filesystem::permissions(
        secret_, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
    CommandResult r =
        runCommand({netlabPath(), "up", "--hosts", "2", "--prefix", prefix_, "--subnet", subnet_});
    ASSERT_EQ(r.status, 0) << r.out;
    lab_up_ = true;
  }
  void TearDown() override {
    if (prefix_.empty()) return;
    if (lab_up_ || std::filesystem::exists("/run/bpftrain-netlab/" + prefix_)) {
      CommandResult r = runCommand({netlabPath(), "down", "--prefix", prefix_});
      EXPECT_EQ(r.status, 0) << r.out;
      EXPECT_TRUE(namespacesWithPrefix(prefix_).empty());
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  std::string host(int i) const { return prefix_ + "host" + std::to_string(i); }
  std::string addr(int i) const { return subnet_ + "." + std::to_string(i + 1); }

  // The collector inside host0 with the controller (extra flags after the common ones); waits
  // for its listening line.
  std::unique_ptr<ChildProcess> startCollector(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {
        "/usr/bin/env", "ip",       "netns",           "exec",      host(0),
        collector_,     "--listen", addr(0) + ":9470", "--metrics", addr(0) + ":9471"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    auto c = std::make_unique<ChildProcess>(argv);
    EXPECT_TRUE(c->waitFor("bpftrain-collector: listening", 30s))
        << "collector did not start\nstdout:\n"
        << c->out << "\nstderr:\n"
        << c->err;
    return c;
  }

  // 4 adaptive ranks, 2 per host, telemetry to host0's collector address.
  std::unique_ptr<ChildProcess> startTraining(const std::string& model, int seconds) {
    return std::make_unique<ChildProcess>(
        std::vector<std::string>{train_,
                                 "--ranks",
                                 "4",
                                 "--netns",
                                 host(0) + "," + host(0) + "," + host(1) + "," + host(1),
                                 "--node-of",
                                 "0,0,1,1",
                                 "--adaptive",
                                 "--secret",
                                 secret_,
                                 "--control",
                                 "127.0.0.1:9472",
                                 "--job",
                                 kJob,
                                 "--collector",
                                 addr(0) + ":9470",
                                 "--model",
                                 model,
                                 "--batch",
                                 "32",
                                 "--steps",
                                 "100000000",
                                 "--eval-every",
                                 "100000000",
                                 "--duration",
                                 std::to_string(seconds)});
  }

  std::map<std::string, double> scrape() { return scrapeIn(host(0), addr(0), 9471); }

  // Polls the collector's /metrics until pred holds; the last scrape.
  std::map<std::string, double> scrapeUntil(
      const std::function<bool(const std::map<std::string, double>&)>& pred,
      std::chrono::seconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    auto m = scrape();
    while (!pred(m) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(200ms);
      m = scrape();
    }
    return m;
  }

  const std::string collector_ = buildPath("collector/app/bpftrain-collector");
  const std::string train_ = buildPath("trainer/app/bpftrain-train");
  std::string prefix_, subnet_, secret_;
  std::filesystem::path dir_;
  bool lab_up_ = false;
};

std::string both(const ChildProcess& p) { return p.out + "\n--- stderr ---\n" + p.err; }

TEST_F(ControllerE2e, SteadyStateSixtySecondsActingRulesControllerNeverSwitches) {
  const std::string decisions = dir_ / "decisions.jsonl";
  // The product configuration (tools/demo): BPF probes on, rules policy acting.
  auto collector =
      startCollector({"--control=act", "--policy", "rules", "--secret", secret_, "--trainer",
                      "127.0.0.1:9472", "--job", kJob, "--decisions-log", decisions});
  ASSERT_FALSE(HasFailure());
  // 12.8 MB of gradients per step (the size the rules thresholds were calibrated with).
  const uint64_t train_start_ns = realtimeNowNs();
  auto train = startTraining("mlp:1024x4", 60);
  // The controller is fed: rank 0's steps reach the collector's windows.
  auto m = scrapeUntil([](const auto& mm) { return sumOf(mm, "bpftrain_step") > 0; }, 30s);
  EXPECT_GT(sumOf(m, "bpftrain_step"), 0) << "no telemetry reached the collector\n"
                                          << both(*collector);
  int rc = train->exitCode(100s);
  ASSERT_EQ(rc, 0) << both(*train);
  // The last windows: decisions counted so far, and that the controller ran at all.
  m = scrape();
  EXPECT_TRUE(std::filesystem::exists(decisions)) << both(*collector);
  std::ifstream in(decisions);
  std::string log((std::istreambuf_iterator<char>(in)), {});
  // No topology switch at all. The one move an unshaped network may still see is pinning: rules
  // pin when the job's cpu migrations hold above 200/s for 5 s, and on this shared 2-core machine
  // other builds push them there (measured 224-478/s in unshaped runs vs ~40/s when quiet). A
  // pinning move is an A/B trial (issue: kept only when it helps), so it may be undone once
  // (reason pin_undone) and is then not retried within this run. So: at most one pinning trial,
  // a move from ring/none and possibly its undo, and no topology switch.
  int decision_lines = 0;
  std::string pinned_to;
  {
    std::istringstream lines(log);
    for (std::string l; std::getline(lines, l);) {
      if (l.empty()) continue;
      auto j = nlohmann::json::parse(l);
      if (j.value("event", "") != "decision") continue;
      ++decision_lines;
      const std::string from = j.value("from", ""), to = j.value("to", "");
      EXPECT_EQ(from.substr(0, from.find('/')), to.substr(0, to.find('/')))
          << "topology switch in steady state (training started at wall_ns " << train_start_ns
          << "):\n"
          << log;
      const std::string reason = j.value("reason", "");
      if (decision_lines == 1) {
        EXPECT_EQ(from, "ring/none") << log;
        EXPECT_TRUE(reason == "migrations" || reason == "cross_node") << log;
      } else {
        EXPECT_EQ(reason, "pin_undone") << "a second decision that is not the trial's undo:\n"
                                        << log;
        EXPECT_EQ(to, "ring/none") << log;
      }
      pinned_to = to.substr(to.find('/') + 1);
    }
  }
  EXPECT_LE(decision_lines, 2) << "the controller switched more than one pinning trial:\n" << log;
  if (pinned_to == "none") pinned_to.clear();
  EXPECT_EQ(sumOf(m, "bpftrain_controller_decisions_total"), decision_lines) << log;

  auto finals = finalLines(train->out + train->err);
  ASSERT_EQ(finals.size(), 4u) << both(*train);
  std::set<std::string> hashes;
  for (const FinalLine& f : finals) {
    EXPECT_EQ(f.epoch, uint64_t(decision_lines)) << "rank " << f.rank;
    EXPECT_EQ(f.topology, "ring") << "rank " << f.rank;
    EXPECT_EQ(f.pinning, pinned_to.empty() ? "none" : pinned_to) << "rank " << f.rank;
    EXPECT_GT(f.step, 0u);
    hashes.insert(f.hash);
  }
  EXPECT_EQ(hashes.size(), 1u) << both(*train);
  std::printf("steady state: %llu steps in 60 s, %d decisions%s, probes up %.0f\n",
              (unsigned long long)finals[0].step, decision_lines,
              pinned_to.empty() ? "" : (" (pinning -> " + pinned_to + ")").c_str(),
              sumOf(m, "bpftrain_probe_up"));
  if (!log.empty()) std::printf("%s", log.c_str());
}

TEST_F(ControllerE2e, CollectorKilledMidRunTrainingCompletesWithItsConfiguration) {
  auto collector = startCollector({"--no-bpf", "--control=act", "--policy", "rules", "--secret",
                                   secret_, "--trainer", "127.0.0.1:9472", "--job", kJob});
  ASSERT_FALSE(HasFailure());
  auto train = startTraining("mlp:128x2", 16);
  // Killed once the collector has seen a few steps from every rank.
  auto m = scrapeUntil([](const auto& mm) { return sumOf(mm, "bpftrain_step") >= 4 * 5; }, 30s);
  ASSERT_GE(sumOf(m, "bpftrain_step"), 4 * 5) << both(*collector);
  double steps_at_kill = 0;
  for (const auto& [k, v] : m)
    if (k.rfind("bpftrain_step{", 0) == 0 && k.find("rank=\"0\"") != std::string::npos)
      steps_at_kill = v;
  ASSERT_EQ(kill(collector->pid(), SIGKILL), 0);
  EXPECT_EQ(collector->exitCode(10s), 128 + SIGKILL);
  // What rank 0 had applied before the kill (nothing, on an unshaped network).
  const std::string before = train->out + train->err;
  std::string last_applied;
  static const std::regex applied("rank 0: applied epoch (\\d+) at step \\d+: topology (\\S+)");
  for (std::sregex_iterator it(before.begin(), before.end(), applied), end; it != end; ++it)
    last_applied = (*it)[1].str() + " " + (*it)[2].str();

  int rc = train->exitCode(60s);
  ASSERT_EQ(rc, 0) << both(*train);
  auto finals = finalLines(train->out + train->err);
  ASSERT_EQ(finals.size(), 4u) << both(*train);
  std::set<std::string> hashes, configs;
  for (const FinalLine& f : finals) {
    hashes.insert(f.hash);
    configs.insert(std::to_string(f.epoch) + " " + f.topology);
    // Training went on after the collector died.
    EXPECT_GT(double(f.step), steps_at_kill) << "rank " << f.rank;
  }
  EXPECT_EQ(hashes.size(), 1u) << both(*train);
  ASSERT_EQ(configs.size(), 1u) << both(*train);
  EXPECT_EQ(*configs.begin(), last_applied.empty() ? "0 ring" : last_applied) << both(*train);
  std::printf("collector killed at rank 0 step %.0f; training finished at step %llu\n",
              steps_at_kill, (unsigned long long)finals[0].step);
}

TEST_F(ControllerE2e, ForgedAndReplayedControlFramesAreRejectedAndCounted) {
  auto train = startTraining("mlp:128x2", 12);
  static const std::regex listening("rank 0: control listening on \\S+ \\(port (\\d+)\\)");
  int port = 0;
  train->readUntil(
      [&] {
        std::smatch m;
        for (const std::string* b : {&train->out, &train->err})
          if (std::regex_search(*b, m, listening)) port = std::stoi(m[1]);
        return port != 0;
      },
      30s);
  ASSERT_NE(port, 0) << both(*train);

  // A genuine decision (epoch 1: hierarchical) is applied on every rank...
  const auto genuine = controlFrame(1, Topology::kHierarchical, PinMode::kNone, kSecret);
  ASSERT_TRUE(sendUdp(host(0), port, genuine));
  ASSERT_TRUE(train->waitFor("rank 3: applied epoch 1", 30s)) << both(*train);
  // ...then the same bytes again (replay) and a newer decision signed with the wrong secret.
  ASSERT_TRUE(sendUdp(host(0), port, genuine));
  ASSERT_TRUE(sendUdp(host(0), port,
                      controlFrame(2, Topology::kHalvingDoubling, PinMode::kNone,
                                   "not-the-secret-of-this-trainer-0123456789")));

  int rc = train->exitCode(60s);
  ASSERT_EQ(rc, 0) << both(*train);
  const std::string out = train->out + train->err;
  std::smatch s;
  ASSERT_TRUE(std::regex_search(out, s,
                                std::regex("rank 0: control accepted (\\d+) resent (\\d+) "
                                           "rejected (\\d+)([^\\n]*)")))
      << out;
  EXPECT_EQ(s[1], "1") << s[0];
  EXPECT_EQ(s[3], "2") << s[0];
  EXPECT_NE(s[4].str().find("bad_mac=1"), std::string::npos) << s[0];
  EXPECT_NE(s[4].str().find("replay=1"), std::string::npos) << s[0];
  EXPECT_EQ(out.find("applied epoch 2"), std::string::npos) << out;

  auto finals = finalLines(out);
  ASSERT_EQ(finals.size(), 4u) << out;
  std::set<std::string> hashes;
  for (const FinalLine& f : finals) {
    EXPECT_EQ(f.epoch, 1u) << "rank " << f.rank;
    EXPECT_EQ(f.topology, "hierarchical") << "rank " << f.rank;
    hashes.insert(f.hash);
  }
  EXPECT_EQ(hashes.size(), 1u) << out;
  std::printf("%s\n", s[0].str().c_str());
}

}  // namespace
}  // namespace bpftrain::tools::testing
