// Fault injection (issue 14 part 3), each fault against the real binaries (e2e):
//  - a rank SIGKILLed under --restarts 1: the launcher restarts the job from the newest valid
//    checkpoint by itself, bit for bit, and prints the time from the failure to the first
//    resumed step;
//  - the disk full while checkpointing (a tmpfs this test mounts): the checkpoint is logged and
//    counted (bpftrain_checkpoint_failures_total), training goes on, the previous checkpoint
//    stays valid and is the one resumed;
//  - the collector SIGKILLed and restarted on the same port mid-run: the ranks are not held up
//    (rank 0's log lines keep their pace), they say hello to the new collector within the hello
//    period and their series continue there; samples sent before that hello are counted;
//  - the collector overloaded (in a CPU-capped cgroup, bpftrain-loadgen offering >= 3x what it
//    takes) while two ranks train: step time within a stated ratio of a run without the flood,
//    /metrics answers in < 1 s throughout, every datagram sent is either counted or in the
//    kernel-drop counter, RSS bounded;
//  - rank 0's control socket flooded with garbage, forged, wrong-job and replayed frames: the
//    steps go on, a new decision still reaches both ranks, and every datagram is counted as
//    refused (bpftrain_control_rejected_total) or dropped by the kernel (_control_dropped_total).
// Every child is killed (its whole process group) and the tmpfs unmounted even on failure.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/collector_process.h"
#include "tests/support/cpu_cgroup.h"
#include "tests/support/requirements.h"
#include "tests/support/signed_control.h"
#include "tests/support/temp_dir.h"

namespace bpftrain::faults {
namespace {

using namespace std::chrono_literals;
using testing::buildPath;
using testing::ChildProcess;
using testing::CollectorProcess;
using testing::TempDir;
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::vector<std::string> train(std::vector<std::string> args) {
  args.insert(args.begin(), buildPath("trainer/app/bpftrain-train"));
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

// Mean step seconds of every rank from the "mean step X s" lines.
std::vector<double> meanSteps(const std::string& out) {
  std::vector<double> v;
  std::regex re(R"(rank \d+: mean step ([0-9.]+) s)");
  for (std::sregex_iterator it(out.begin(), out.end(), re), end; it != end; ++it)
    v.push_back(std::stod((*it)[1]));
  return v;
}

double valueOf(const CollectorProcess::Metrics& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? -1 : it->second;
}

std::vector<std::string> collectorArgs(int udp_port, std::vector<std::string> extra = {}) {
  std::vector<std::string> a{"--listen",  "127.0.0.1:" + std::to_string(udp_port),
                             "--metrics", "127.0.0.1:0",
                             "--no-bpf",  "--step",
                             "100ms",     "--window",
                             "2s"};
  a.insert(a.end(), extra.begin(), extra.end());
  return a;
}

// A tmpfs of `bytes` mounted on a fresh directory; unmounted (lazily, so a file still open
// cannot keep it) and removed in the destructor.
class SmallTmpfs {
 public:
  explicit SmallTmpfs(size_t bytes) : dir_("bpftrain-diskfull") {
    path_ = dir_.path() + "/mnt";
    fs::create_directories(path_);
    const std::string opts = "size=" + std::to_string(bytes) + ",mode=0700";
    mounted_ =
        mount("bpftrain-diskfull", path_.c_str(), "tmpfs", MS_NOSUID | MS_NODEV, opts.c_str()) == 0;
  }
  ~SmallTmpfs() {
    if (mounted_) umount2(path_.c_str(), MNT_DETACH);
  }
  bool mounted() const { return mounted_; }
  const std::string& path() const { return path_; }

 private:
  TempDir dir_;
  std::string path_;
  bool mounted_ = false;
};

TEST(Faults, KilledRankWithRestartsResumesBitForBitFromTheNewestCheckpoint) {
  const std::vector<std::string> common{
      "--ranks", "2",      "--model", "mlp:64x2",     "--steps", "600",       "--collector",
      "none",    "--seed", "11",      "--eval-every", "0",       "--timeout", "10"};
  ChildProcess whole(train(common));
  ASSERT_EQ(whole.exitCode(90s), 0) << whole.err;
  const std::string expected = finalHashes(whole.out)[0];
  ASSERT_FALSE(expected.empty()) << whole.out;

  TempDir dir("bpftrain-restarts");
  std::vector<std::string> args = common;
  args.insert(args.end(),
              {"--checkpoint", dir.path(), "--checkpoint-every", "50", "--restarts", "1"});
  ChildProcess p(train(args));
  // Killed once a checkpoint exists, so the restart has one to resume from.
  auto victim = p.waitLine(std::regex(R"(launcher: rank 1 pid (\d+))"), 30s);
  ASSERT_TRUE(victim) << p.out << p.err;
  const pid_t pid = std::stoi((*victim)[1]);
  const auto deadline = Clock::now() + 60s;
  auto hasCheckpoint = [&] {
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir.path(), ec))
      if (e.path().extension() == ".bin") return true;
    return false;
  };
  while (!hasCheckpoint() && Clock::now() < deadline) p.readUntil([] { return false; }, 20ms);
  ASSERT_TRUE(hasCheckpoint()) << p.out << p.err;
  ASSERT_TRUE(finalHashes(p.out).empty()) << "the run ended before the kill: lengthen it";
  ASSERT_EQ(kill(pid, SIGKILL), 0);

  ASSERT_EQ(p.exitCode(120s), 0) << p.err;
  // The launcher names the first rank it saw fail: the one killed, or its peer whose allreduce
  // broke first.
  EXPECT_TRUE(std::regex_search(
      p.err, std::regex(R"(rank [01] \(pid \d+\) (killed by signal 9|exited with status 1))")))
      << p.err;
  EXPECT_NE(p.err.find("restart 1 of 1 from the newest valid checkpoint"), std::string::npos)
      << p.err;
  std::smatch resumed;
  ASSERT_TRUE(
      std::regex_search(p.out, resumed, std::regex(R"(rank 0: resumed from \S+ at step (\d+))")))
      << p.out;
  std::smatch took;
  ASSERT_TRUE(std::regex_search(
      p.err, took, std::regex(R"(restart 1: first resumed step ([0-9.]+) s after the failure)")))
      << p.err;
  const double restart_s = std::stod(took[1]);
  // The issue's aim is <= 2 s (tools/bench restart measures it); a loaded CI host gets slack.
  EXPECT_LT(restart_s, 10.0);
  auto h = finalHashes(p.out);
  ASSERT_EQ(h.size(), 2u) << p.out;
  EXPECT_EQ(h[0], expected);
  EXPECT_EQ(h[1], expected);
  std::printf(
      "rank 1 killed, restarted from step %s: first resumed step %.3f s after the failure\n",
      resumed[1].str().c_str(), restart_s);
}

TEST(Faults, DiskFullWhileCheckpointingKeepsThePreviousCheckpointAndTrainingGoesOn) {
  BPFTRAIN_REQUIRE_ROOT("mounts a small tmpfs for the checkpoints");
  const std::vector<std::string> common{"--ranks",
                                        "2",
                                        "--model",
                                        "mlp:64x2",
                                        "--seed",
                                        "3",
                                        "--eval-every",
                                        "0",
                                        "--checkpoint-every",
                                        "20"};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = common;
    a.insert(a.end(), extra.begin(), extra.end());
    return train(a);
  };
  // One checkpoint's size, from a directory with room.
  TempDir roomy("bpftrain-ckpt-size");
  ChildProcess sizing(with({"--steps", "20", "--collector", "none", "--checkpoint", roomy.path()}));
  ASSERT_EQ(sizing.exitCode(60s), 0) << sizing.err;
  uintmax_t one = 0;
  for (const auto& e : fs::directory_iterator(roomy.path())) one = fs::file_size(e.path());
  ASSERT_GT(one, 0u);
  ChildProcess whole(with({"--steps", "100", "--collector", "none", "--checkpoint", roomy.path()}));
  ASSERT_EQ(whole.exitCode(60s), 0) << whole.err;
  const std::string expected = finalHashes(whole.out)[0];

  // Room for one checkpoint and a half: the second write runs out of space.
  SmallTmpfs full((one * 3 / 2 + 4095) / 4096 * 4096);
  ASSERT_TRUE(full.mounted()) << "mount tmpfs: " << std::strerror(errno);
  CollectorProcess c(collectorArgs(0), 10s);
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  ChildProcess run(with({"--steps", "100", "--checkpoint", full.path(), "--collector",
                         "127.0.0.1:" + std::to_string(c.udp_port)}));
  ASSERT_EQ(run.exitCode(60s), 0) << run.err;
  EXPECT_NE(run.err.find("checkpoint at step 40 not written"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("No space left on device"), std::string::npos) << run.err;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(full.path())) left.push_back(e.path().filename());
  ASSERT_EQ(left.size(), 1u) << "a torn temp file was left behind";
  EXPECT_EQ(left[0], "ckpt-00000000000000000020.bin");
  // Steps 40, 60, 80, 100 failed; each is counted and reaches the collector.
  const std::string key = "bpftrain_checkpoint_failures_total{job=\"default\",rank=\"0\"}";
  auto m = c.scrapeUntil([&](const auto& mm) { return valueOf(mm, key) >= 4; }, 10s);
  EXPECT_EQ(valueOf(m, key), 4) << c.proc->err;

  ChildProcess resumed(
      with({"--steps", "100", "--checkpoint", full.path(), "--collector", "none", "--resume"}));
  ASSERT_EQ(resumed.exitCode(60s), 0) << resumed.err;
  EXPECT_NE(resumed.out.find("resumed from " + full.path() + "/ckpt-00000000000000000020.bin"),
            std::string::npos)
      << resumed.out;
  EXPECT_EQ(finalHashes(resumed.out)[0], expected);
}

// Rank 0's "step N loss ..." lines (--eval-every) with the time each was read, on a thread that
// owns the training process until it exits.
struct PaceRecorder {
  ChildProcess& proc;
  std::vector<Clock::time_point> at;
  std::atomic<bool> done{false};
  std::thread thread;

  explicit PaceRecorder(ChildProcess& p) : proc(p) {
    thread = std::thread([this] {
      static const std::regex re(R"(rank 0: step \d+ loss)");
      size_t seen = 0;
      proc.readUntil(
          [&] {
            size_t n = 0;
            for (std::sregex_iterator it(proc.out.begin(), proc.out.end(), re), end; it != end;
                 ++it)
              ++n;
            for (; seen < n; ++seen) at.push_back(Clock::now());
            return false;
          },
          120s);
      done = true;
    });
  }
  ~PaceRecorder() {
    if (thread.joinable()) thread.join();
  }
};

TEST(Faults, CollectorKilledAndRestartedMidRunTrainingKeepsItsPaceAndSeriesContinue) {
  auto first = std::make_unique<CollectorProcess>(collectorArgs(0), 10s);
  ASSERT_GT(first->udp_port, 0) << first->proc->err;
  const int port = first->udp_port;
  ChildProcess p(train({"--ranks", "2", "--model", "mlp:64x2", "--steps", "100000000", "--duration",
                        "12", "--eval-every", "20", "--metrics-hz", "20", "--collector",
                        "127.0.0.1:" + std::to_string(port)}));
  // The pace is read on its own thread, so what the test does meanwhile cannot delay it.
  auto pace = std::make_unique<PaceRecorder>(p);
  const std::string step0 = "bpftrain_step{job=\"default\",rank=\"0\"}";
  auto m = first->scrapeUntil([&](const auto& mm) { return valueOf(mm, step0) >= 100; }, 30s);
  ASSERT_GE(valueOf(m, step0), 100) << first->proc->err;
  const double step_at_kill = valueOf(m, step0);
  const auto killed_at = Clock::now();
  ASSERT_EQ(kill(first->proc->pid(), SIGKILL), 0);
  EXPECT_EQ(first->proc->exitCode(10s), 128 + SIGKILL);

  CollectorProcess second(collectorArgs(port), 10s);
  ASSERT_EQ(second.udp_port, port) << second.proc->err;
  const auto restarted_at = Clock::now();
  // Series continue once each rank's periodic hello (every 3 s) reaches the new collector.
  const std::string step1 = "bpftrain_step{job=\"default\",rank=\"1\"}";
  m = second.scrapeUntil(
      [&](const auto& mm) { return valueOf(mm, step0) > step_at_kill && valueOf(mm, step1) > 0; },
      10s);
  const auto back_at = Clock::now();
  EXPECT_GT(valueOf(m, step0), step_at_kill) << second.proc->err;
  EXPECT_GT(valueOf(m, step1), 0);
  EXPECT_EQ(valueOf(m, "bpftrain_collector_senders"), 2);
  // Samples that arrived before their sender's hello are counted, not silently lost.
  const double before_hello =
      valueOf(m, "bpftrain_collector_dropped_total{reason=\"unknown_sender\"}");

  // The reader owns `p` until the run ends (its pipes close); only then may this thread use it.
  pace->thread.join();
  ASSERT_EQ(p.exitCode(60s), 0) << p.err;
  auto h = finalHashes(p.out);
  ASSERT_EQ(h.size(), 2u) << p.out;
  EXPECT_EQ(h[0], h[1]);
  // Pace: intervals between rank 0's log lines (20 steps each) before the kill vs. the longest
  // interval that overlaps the kill and the restart.
  const auto& at = pace->at;
  ASSERT_GE(at.size(), 10u) << p.out;
  std::vector<double> before, around;
  for (size_t i = 1; i < at.size(); ++i) {
    const double d = std::chrono::duration<double>(at[i] - at[i - 1]).count();
    if (at[i] < killed_at)
      before.push_back(d);
    else if (at[i - 1] <= back_at)
      around.push_back(d);
  }
  ASSERT_GE(before.size(), 3u);
  ASSERT_FALSE(around.empty());
  std::sort(before.begin(), before.end());
  const double median = before[before.size() / 2];
  const double worst = *std::max_element(around.begin(), around.end());
  // Twice the median plus 100 ms of scheduling noise on a shared 2-core host; a blocked send
  // or a reconnect wait would show up as seconds (the collector was away for the restart).
  EXPECT_LT(worst, 2 * median + 0.1) << "median " << median;
  std::printf(
      "collector killed at rank 0 step %.0f, restarted after %.3f s, series back %.3f s later "
      "(%.0f samples before the hello counted as unknown_sender); 20-step interval: median "
      "%.3f s before, worst %.3f s across the kill\n",
      step_at_kill, std::chrono::duration<double>(restarted_at - killed_at).count(),
      std::chrono::duration<double>(back_at - restarted_at).count(), before_hello, median, worst);
}

uint64_t rssKiB(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

TEST(Faults, OverloadedCollectorNeitherSlowsTrainingNorLosesCountOfADatagram) {
  // The collector runs in a cgroup capped at kCollectorCpu of one CPU, as a systemd unit with
  // CPUQuota= would run it, and at nice 19; the flood at nice 19. The cap is what lets a flood
  // reach the issue's 3x: with the collector free on this shared 2-core host the senders' own
  // CPU was the limit (one uncapped ingest thread parses ~2 M lines/s here; 2 generators of
  // 120-line datagrams reached 1.1-2.0x, 500-line ones 3.7-6.9x but slowed training past 1.5x
  // through loopback's kernel CPU in 3 of 6 runs; nice 19 and SCHED_IDLE do not hold back a
  // process on an idle core). What it took under overload is its capacity, at least its
  // lossless rate, so offered >= 3x accepted is offered >= 3x the lossless rate. Measured with
  // one generator of 120-line datagrams: at 10,000/s and load ~9, capped at 0.15 CPU it took 2.0x
  // less than offered, 0.06 CPU 3.6-3.9x, 0.04 CPU 5.4-6.1x; on a quiet host 0.04 CPU took
  // 6.7-7.1x less with training x1.43-1.75, and 0.03 CPU at 4,000/s (below) 4.1-5.1x less with
  // training x1.14-1.59 and the worst scrape 0.09-0.20 s (4 runs). The cap bounds what the
  // collector can take on a given CPU, but a faster CPU takes more under the same cap: a CI
  // machine took 1,350/s at 0.03 CPU, 2.96x less than offered, hence 0.02 CPU (below): here
  // 596-727/s, 5.5-6.7x, with training x0.95-1.64 and the worst scrape 0.10-0.20 s (4 runs). A
  // faster machine again (2026-12-07) took 1,340/s at 0.02 CPU, 2.98x less than offered, hence
  // 0.015: there 730-793/s, 5.0-5.5x, training x1.10-1.27, the worst scrape 0.03-0.20 s (3 runs).
  constexpr int kLinesPerDatagram = 120;
  constexpr double kCollectorCpu = 0.015;
  constexpr int kDatagramsPerSecond = 4000;
  std::string why;
  auto cgroup = testing::CpuCgroup::create(kCollectorCpu, why);
  if (!cgroup) BPFTRAIN_SKIP_OR_FAIL_UNDER_CI(why);
  const std::string nice = "/usr/bin/nice";
  ASSERT_EQ(access(nice.c_str(), X_OK), 0);
  auto collector = std::make_unique<ChildProcess>(std::vector<std::string>{
      nice, "-n", "19", buildPath("collector/app/bpftrain-collector"), "--listen", "127.0.0.1:0",
      "--metrics", "127.0.0.1:0", "--no-bpf", "--ingest-threads", "1", "--rcvbuf", "65536",
      "--step", "100ms", "--window", "2s"});
  ASSERT_TRUE(cgroup->add(collector->pid())) << "cannot move the collector into " << cgroup->path();
  auto ready =
      collector->waitLine(std::regex("udp=[0-9.]+:([0-9]+) metrics=[0-9.]+:([0-9]+)"), 10s);
  ASSERT_TRUE(ready) << collector->err;
  const int udp = std::stoi((*ready)[1]), http = std::stoi((*ready)[2]);
  const std::string target = "127.0.0.1:" + std::to_string(udp);
  auto scrape = [&] { return testing::parseMetrics(testing::httpGet("127.0.0.1", http)); };
  const std::vector<std::string> training{"--ranks",     "2",    "--model",      "mlp:64x2",
                                          "--steps",     "1500", "--eval-every", "0",
                                          "--collector", target, "--metrics-hz", "20"};
  ChildProcess quiet(train(training));
  ASSERT_EQ(quiet.exitCode(90s), 0) << quiet.err;
  const uint64_t rss_before = rssKiB(collector->pid());

  auto loadgen = [&](std::vector<std::string> a) {
    a.insert(a.begin(), {nice, "-n", "19", buildPath("collector/app/bpftrain-loadgen"), "--target",
                         target, "--protocol", "statsd", "--sockets", "1"});
    return std::make_unique<ChildProcess>(a);
  };
  std::vector<std::unique_ptr<ChildProcess>> floods;
  for (int i = 0; i < 1; ++i)
    floods.push_back(
        loadgen({"--rate", std::to_string(kLinesPerDatagram * kDatagramsPerSecond),
                 "--per-datagram", std::to_string(kLinesPerDatagram), "--duration", "4"}));
  ChildProcess busy(train(training));
  // /metrics keeps answering while the flood lasts.
  double worst_scrape = 0;
  int scrapes = 0;
  auto flooding = [&] {
    for (auto& f : floods)
      if (f->exitCode(0ms) < 0) return true;
    return false;
  };
  while (flooding()) {
    const auto t0 = Clock::now();
    auto mm = scrape();
    worst_scrape = std::max(worst_scrape, std::chrono::duration<double>(Clock::now() - t0).count());
    EXPECT_FALSE(mm.empty()) << "scrape failed during the flood";
    ++scrapes;
    for (auto& f : floods) f->readUntil([] { return false; }, 100ms);
  }
  ASSERT_EQ(busy.exitCode(120s), 0) << busy.err;
  const uint64_t rss_after = rssKiB(collector->pid());
  // One more datagram after everything, so the kernel's drop count (SO_RXQ_OVFL rides on the
  // next datagram received) is up to date.
  auto tail = loadgen({"--workers", "1", "--hz", "20", "--duration", "0.3"});
  ASSERT_EQ(tail->exitCode(30s), 0) << tail->err;

  auto json = [](const ChildProcess& p) {  // the generator's one final JSON line
    const size_t end = p.out.find_last_not_of('\n');
    const size_t begin = p.out.rfind('\n', end);
    return nlohmann::json::parse(
        p.out.substr(begin == std::string::npos ? 0 : begin + 1,
                     end - (begin == std::string::npos ? 0 : begin + 1) + 1));
  };
  double offered = 0, flood_s = 0;
  for (auto& f : floods) {
    ASSERT_EQ(f->exitCode(30s), 0) << f->err;
    offered += double(json(*f)["datagrams"]);
    flood_s = std::max(flood_s, double(json(*f)["seconds"]));
  }
  double sent = offered + double(json(*tail)["datagrams"]);
  std::regex frames_re(R"(rank \d+: telemetry frames (\d+))");
  for (const ChildProcess* p : {&quiet, &busy})
    for (std::sregex_iterator it(p->out.begin(), p->out.end(), frames_re), end; it != end; ++it)
      sent += std::stod((*it)[1]);
  CollectorProcess::Metrics m;
  const auto deadline = Clock::now() + 10s;
  do {
    m = scrape();
  } while (valueOf(m, "bpftrain_collector_datagrams_total") +
                   valueOf(m, "bpftrain_collector_kernel_drops_total") <
               sent &&
           Clock::now() < deadline);
  const double counted = valueOf(m, "bpftrain_collector_datagrams_total");
  const double dropped = valueOf(m, "bpftrain_collector_kernel_drops_total");
  EXPECT_EQ(counted + dropped, sent) << "counted " << counted << " dropped " << dropped;
  // Overload: what was offered is well beyond what the collector took meanwhile.
  const double offered_rate = offered / flood_s;
  const double accepted_rate = (offered - dropped) / flood_s;
  EXPECT_GE(offered_rate, 3 * accepted_rate) << "not a 3x overload: lower kCollectorCpu";
  EXPECT_GT(cgroup->throttledPeriods(), 0) << "the collector never reached its CPU cap";

  const auto q = meanSteps(quiet.out), b = meanSteps(busy.out);
  ASSERT_EQ(q.size(), 2u);
  ASSERT_EQ(b.size(), 2u);
  const double ratio = std::max(b[0], b[1]) / std::max(q[0], q[1]);
  // Steps of this model take 0.5-0.9 ms, mostly Gloo's loopback round trips, which the flood's
  // own loopback traffic slows in the kernel whatever the collector does: measured x0.52-1.57
  // over 10 runs with 120-line datagrams (the 1.57 in a clean-clone CI run). A send that blocked
  // on the collector would cost a step milliseconds to seconds, so twice the quiet step is the
  // bound.
  EXPECT_LT(ratio, 2.0) << "mean step " << std::max(q[0], q[1]) << " s alone, "
                        << std::max(b[0], b[1]) << " s under the flood";
  EXPECT_LT(worst_scrape, 1.0);
  EXPECT_GT(scrapes, 5);
  // Bounded memory: the flood's series are a fixed set; its datagrams are not kept.
  EXPECT_LT(rss_after, rss_before + 64 * 1024) << "RSS " << rss_before << " -> " << rss_after;
  std::printf(
      "flood: %.3g datagrams/s offered (%d StatsD lines each), %.3g/s accepted (%.1fx); %.0f "
      "counted + %.0f kernel drops = %.0f sent; mean step %.6f s alone, %.6f s under the flood "
      "(x%.2f); worst of %d scrapes %.3f s; collector RSS %llu -> %llu KiB, capped at %.3f CPU "
      "(throttled in %ld periods of 100 ms)\n",
      offered_rate, kLinesPerDatagram, accepted_rate, offered_rate / std::max(accepted_rate, 1.0),
      counted, dropped, sent, std::max(q[0], q[1]), std::max(b[0], b[1]), ratio, scrapes,
      worst_scrape, (unsigned long long)rss_before, (unsigned long long)rss_after, kCollectorCpu,
      cgroup->throttledPeriods());
}

// The control flood: bursts of kControlFloodBurst datagrams every 10 ms, thousands of times what a
// controller sends (a few a second). A burst is more than the socket buffer holds (~150 of these)
// and than a step boundary reads (ControlReceiver::kMaxDatagramsPerPoll), so the kernel drops part
// of every burst whatever the host's load; and less than loopback's per-CPU backlog
// (netdev_max_backlog, 1000, whose drops the socket would not count), so the socket's own drop
// count is the whole loss.
constexpr int kControlFloodBurst = 500;

TEST(Faults, ControlChannelFloodedWithGarbageForgeriesAndReplaysTrainingGoesOnEveryFrameCounted) {
  TempDir dir;
  const std::string secret = "flood-shared-secret";
  const std::string secret_file = dir.path() + "/secret";
  std::ofstream(secret_file) << secret;
  chmod(secret_file.c_str(), 0600);
  CollectorProcess c(collectorArgs(0), 10s);
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  ChildProcess p(train({"--ranks", "2", "--steps", "100000000", "--adaptive", "--secret",
                        secret_file, "--control", "127.0.0.1:0", "--job", "flood", "--collector",
                        "127.0.0.1:" + std::to_string(c.udp_port), "--metrics-hz", "20",
                        "--eval-every", "0", "--model", "mlp:64x2"}));
  auto port_line = p.waitLine(std::regex(R"(control listening on \S+ \(port (\d+)\))"), 60s);
  ASSERT_TRUE(port_line) << p.err;
  const uint16_t port = uint16_t(std::stoi((*port_line)[1]));
  const std::string step0 = "bpftrain_step{job=\"flood\",rank=\"0\"}";
  auto stepNow = [&] { return valueOf(c.scrape(), step0); };
  auto m = c.scrapeUntil([&](const auto& mm) { return valueOf(mm, step0) > 0; });
  ASSERT_GT(valueOf(m, step0), 0) << p.err;

  const int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  // The A/A side: a socket nobody reads, to price what the same flood costs this host's kernel
  // and the sender without the trainer in the loop.
  const int idle = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(idle, 0);
  auto loopback = [](uint16_t port_number) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port_number);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return a;
  };
  sockaddr_in idle_at = loopback(0);
  ASSERT_EQ(bind(idle, reinterpret_cast<sockaddr*>(&idle_at), sizeof(idle_at)), 0);
  socklen_t idle_len = sizeof(idle_at);
  ASSERT_EQ(getsockname(idle, reinterpret_cast<sockaddr*>(&idle_at), &idle_len), 0);
  const sockaddr_in control_at = loopback(port);
  auto sendTo = [&](const std::vector<uint8_t>& d, const sockaddr_in& to) {
    return sendto(fd, d.data(), d.size(), 0, reinterpret_cast<const sockaddr*>(&to), sizeof(to)) ==
           ssize_t(d.size());
  };
  auto send = [&](const std::vector<uint8_t>& d) { return sendTo(d, control_at); };
  // A decision accepted before the flood: its replays are part of the flood.
  const auto first =
      testing::signedDecision("flood", 1, Topology::kHalvingDoubling, PinMode::kNone, secret);
  ASSERT_TRUE(send(first));
  ASSERT_TRUE(p.waitFor("rank 1: applied epoch 1", 30s)) << p.out << p.err;

  // Step rate before the flood, then during it (the flood's sender at nice 19, as a flood
  // from elsewhere would not share this host's CPUs).
  auto rate = [&](const std::function<void()>& during) {
    const double s0 = stepNow();
    const auto t0 = Clock::now();
    during();
    const double s1 = stepNow();
    return (s1 - s0) / std::chrono::duration<double>(Clock::now() - t0).count();
  };
  const double before = rate([] { std::this_thread::sleep_for(2s); });
  std::vector<std::vector<uint8_t>> kinds;
  std::mt19937 rng(14);
  for (int i = 0; i < 32; ++i) {  // garbage: random bytes of random sizes
    std::vector<uint8_t> g(rng() % 600);
    for (auto& b : g) b = uint8_t(rng());
    kinds.push_back(std::move(g));
  }
  kinds.push_back(testing::signedDecision("flood", 9, Topology::kRing, PinMode::kNone, "forged"));
  kinds.push_back(testing::signedDecision("other", 9, Topology::kRing, PinMode::kNone, secret));
  kinds.push_back(first);  // replays
  // 2 s of flood towards `to`; returns the datagrams sent.
  auto flood = [&](const sockaddr_in& to) {
    uint64_t n = 0;
    std::thread sender([&] {
      setpriority(PRIO_PROCESS, 0, 19);  // this thread only (Linux: a tid is a process id here)
      const auto start = Clock::now();
      for (int tick = 0; Clock::now() - start < 2s; ++tick) {
        for (int i = 0; i < kControlFloodBurst; ++i)
          n += sendTo(kinds[(tick * 7 + i) % kinds.size()], to);
        std::this_thread::sleep_until(start + std::chrono::milliseconds(10 * (tick + 1)));
      }
    });
    sender.join();
    return n;
  };
  const double baseline = rate([&] { flood(idle_at); });
  close(idle);
  uint64_t sent = 0;
  const double during = rate([&] { sent = flood(control_at); });
  // Every datagram of the flood was refused by rank 0 or dropped by its socket, and counted. The
  // socket's drop count rides on the next datagram it receives, and one sent while the buffer
  // is still full is dropped itself: one garbage datagram, then another if the counts do not add
  // up within 3 s (telemetry reports drops once a second).
  const std::string rejected_key = "bpftrain_control_rejected_total{job=\"flood\",rank=\"0\"}";
  const std::string dropped_key = "bpftrain_control_dropped_total{job=\"flood\",rank=\"0\"}";
  auto counted = [&](const CollectorProcess::Metrics& mm) {
    return std::max(valueOf(mm, rejected_key), 0.0) + std::max(valueOf(mm, dropped_key), 0.0);
  };
  for (int tail = 0; tail < 5; ++tail) {
    sent += send({0xde, 0xad});
    m = c.scrapeUntil([&](const auto& mm) { return counted(mm) >= double(sent); }, 3s);
    if (counted(m) >= double(sent)) break;
  }
  EXPECT_EQ(counted(m), double(sent)) << "rejected " << valueOf(m, rejected_key) << " dropped "
                                      << valueOf(m, dropped_key) << " of " << sent << " sent";
  // A new decision still gets through, and is applied by both ranks.
  ASSERT_TRUE(send(testing::signedDecision("flood", 2, Topology::kBcube, PinMode::kNone, secret)));
  ASSERT_TRUE(p.waitFor("rank 1: applied epoch 2", 30s)) << p.out << p.err;
  close(fd);
  // Training went on: a boundary that waited on the flood would stop the steps for as long as
  // it lasted. The flood itself costs this 2-core host's kernel and sender CPU whoever its
  // target (on a quiet host a 0.4 ms step ran at x0.38 of its pace under 50,000 datagrams/s), so
  // the pace is judged against the same flood aimed at a socket nobody reads. A boundary that
  // waited for the flood to end would show next to no steps; what rank 0's reading and refusing
  // adds (at most kMaxDatagramsPerPoll per boundary) measured x0.26-1.18 of that pace with CI's
  // compiler loading both cores, so a fifth is the bound.
  EXPECT_GT(during, 0.2 * baseline) << "steps/s " << before << " before, " << baseline
                                    << " under the flood elsewhere, " << during << " during";
  std::printf(
      "control flood: %llu datagrams in 2 s (%d kinds: garbage, forged, wrong job, replays): "
      "%.0f refused + %.0f dropped by the kernel; steps/s %.0f before, %.0f under the same flood "
      "to an unread socket, %.0f during (x%.2f of that)\n",
      (unsigned long long)sent, int(kinds.size()), valueOf(m, rejected_key),
      std::max(valueOf(m, dropped_key), 0.0), before, baseline, during, during / baseline);
  kill(p.pid(), SIGTERM);
  EXPECT_EQ(p.exitCode(30s), 128 + SIGTERM);
}

}  // namespace
}  // namespace bpftrain::faults
