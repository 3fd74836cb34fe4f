// Soak (issue 14 part 7; label bench, tools/bench soak runs it for 30 minutes): a collector with
// the controller acting on two adaptive ranks at the full telemetry rate (100 Hz), BPF probes on
// when root, while short jobs come and go (bpftrain-loadgen, 50 new senders every second, each job
// its own name). Every BPFTRAIN_SOAK_SAMPLE_S seconds it samples the collector's RSS, open fds,
// series, senders, lost frames and kernel drops, prints the table and checks that after the
// warm-up (series TTL + the senders' 30 s idle limit) they stay flat.
// Measured 2026-12-01, 70 s, 5 s samples: --no-bpf (as nobody) passes: RSS 41.2..43.7 MB (+5.2%),
// fds 9, series 934..1234, senders 1452..1502 of 3500 seen. As root with the probes on it fails:
// series (+150/s) and senders (+50/s) never leave -- every announced sender became a probe target
// (50 slots per loadgen job, whose 50 senders share one pid) whose series the loader kept for
// good, and once the 255 slots were used a line per untraced target filled the collector's
// undrained stderr, blocking its main loop and with it sender expiry. Fixed in the loader (one
// slot per process, a slot's series expire with it, that log line at most once a minute).
// After, as root with the probes on, 360 s, 10 s samples (tools/bench soak --minutes 6): passes,
// RSS 67.6..69.4 MB (+2.7%), fds 151, series 2283..2660, senders 1452..1502 of 17750 seen, 35
// log lines. 2026-12-03, 30 min at load 6-13 (sampled run statistics, the keeper): RSS
// 74.3..77.4 MB (+4.2%), fds 142..145 (transient), series 2107..2661, senders 1402..1552 of
// 87,950 seen, no frame lost; it failed on 694 log lines, the cpu_contention diagnosis flipping
// between the two ranks (now the host's when two ranks wait), and on the fds' range.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.h"
#include "tests/support/collector_process.h"
#include "tests/support/temp_dir.h"

namespace bpftrain::faults {
namespace {

using namespace std::chrono_literals;
using testing::buildPath;
using testing::ChildProcess;
using testing::CollectorProcess;
using Clock = std::chrono::steady_clock;

int envInt(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && std::atoi(v) > 0 ? std::atoi(v) : fallback;
}

double valueOf(const CollectorProcess::Metrics& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? 0 : it->second;
}

uint64_t rssKiB(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("VmRSS:", 0) == 0) return std::stoull(line.substr(6));
  return 0;
}

size_t openFds(pid_t pid) {
  std::error_code ec;
  size_t n = 0;
  for (auto it = std::filesystem::directory_iterator("/proc/" + std::to_string(pid) + "/fd", ec);
       !ec && it != std::filesystem::directory_iterator(); it.increment(ec))
    ++n;
  return n;
}

// The `top` most frequent kinds of line in a log, a count and an example each: a kind is the line
// after its timestamp with every digit run as N (what repeated when the log grew).
std::string frequentLineKinds(const std::string& log, size_t top) {
  std::map<std::string, std::pair<size_t, std::string>> kinds;
  size_t start = 0;
  while (start < log.size()) {
    size_t end = log.find('\n', start);
    if (end == std::string::npos) end = log.size();
    const std::string line = log.substr(start, end - start);
    start = end + 1;
    const size_t space = line.find(' ');
    const std::string body = space == std::string::npos ? line : line.substr(space + 1);
    std::string kind;
    for (size_t i = 0; i < body.size(); ++i) {
      if (!std::isdigit(static_cast<unsigned char>(body[i]))) {
        kind += body[i];
      } else if (i == 0 || !std::isdigit(static_cast<unsigned char>(body[i - 1]))) {
        kind += 'N';
      }
    }
    auto& [count, example] = kinds[kind];
    if (count++ == 0) example = line;
  }
  std::vector<std::pair<size_t, std::string>> ranked;
  for (const auto& [kind, ce] : kinds) ranked.emplace_back(ce.first, ce.second);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& a, const auto& b) { return a.first > b.first; });
  std::string out;
  for (size_t i = 0; i < std::min(top, ranked.size()); ++i)
    out += "  " + std::to_string(ranked[i].first) + "x  " + ranked[i].second.substr(0, 300) + "\n";
  return out;
}

// A UDP port free right now (the trainer's control port must be known to the collector first).
int freeUdpPort() {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
    port = ntohs(a.sin_port);
  close(fd);
  return port;
}

struct Sample {
  double t_s;
  uint64_t rss_kib;
  size_t fds;
  double series, senders, frames_lost, kernel_drops, steps;
};

TEST(Soak, CollectorMemorySeriesAndSendersStayFlatWhileJobsComeAndGo) {
  const int seconds = envInt("BPFTRAIN_SOAK_SECONDS", 90);
  const int sample_s = envInt("BPFTRAIN_SOAK_SAMPLE_S", 5);
  constexpr int kTtlS = 5, kSenderIdleS = 30;
  testing::TempDir dir("bpftrain-soak");
  const std::string secret = dir.path() + "/secret";
  {
    std::ofstream(secret) << "soak-test-secret-0123456789abcdef0123456789";
    std::filesystem::permissions(
        secret, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  const int control_port = freeUdpPort();
  ASSERT_GT(control_port, 0);
  std::vector<std::string> args{"--listen",
                                "127.0.0.1:0",
                                "--metrics",
                                "127.0.0.1:0",
                                "--series-ttl",
                                std::to_string(kTtlS) + "s",
                                "--control=act",
                                "--policy",
                                "rules",
                                "--secret",
                                secret,
                                "--trainer",
                                "127.0.0.1:" + std::to_string(control_port),
                                "--job",
                                "soak"};
  if (geteuid() != 0) args.push_back("--no-bpf");
  CollectorProcess c(args, 30s);
  ASSERT_GT(c.udp_port, 0) << c.proc->err;
  const std::string target = "127.0.0.1:" + std::to_string(c.udp_port);
  ChildProcess train({buildPath("trainer/app/bpftrain-train"),
                      "--ranks",
                      "2",
                      "--model",
                      "mlp:64x2",
                      "--steps",
                      "1000000000",
                      "--duration",
                      std::to_string(seconds),
                      "--eval-every",
                      "0",
                      "--metrics-hz",
                      "100",
                      "--adaptive",
                      "--secret",
                      secret,
                      "--control",
                      "127.0.0.1:" + std::to_string(control_port),
                      "--job",
                      "soak",
                      "--collector",
                      target});

  // Short jobs: one second each, 50 ranks with sender ids of their own.
  std::atomic<bool> stop{false};
  std::atomic<int> jobs{0};
  std::thread churn([&] {
    for (int j = 1; !stop; ++j) {
      ChildProcess g({buildPath("collector/app/bpftrain-loadgen"), "--target", target, "--workers",
                      "50", "--hz", "20", "--duration", "1", "--job", "churn-" + std::to_string(j),
                      "--sender-base", std::to_string(1'000'000 + j * 1000)});
      if (g.exitCode(30s) == 0) ++jobs;
    }
  });

  std::vector<Sample> samples;
  const auto start = Clock::now();
  for (auto next = start + std::chrono::seconds(sample_s);
       Clock::now() < start + std::chrono::seconds(seconds);
       next += std::chrono::seconds(sample_s)) {
    // Both children's pipes drained while waiting: a collector whose stderr fills blocks its
    // main loop in a log line, which stops expiry (that, with a log line per untraced target,
    // was the growth this bench once measured with the probes on).
    while (Clock::now() < next) {
      train.readUntil([] { return false; }, 100ms);
      c.proc->readUntil([] { return false; }, 100ms);
    }
    auto m = c.scrape();
    Sample s{std::chrono::duration<double>(Clock::now() - start).count(),
             rssKiB(c.proc->pid()),
             openFds(c.proc->pid()),
             valueOf(m, "bpftrain_collector_series"),
             valueOf(m, "bpftrain_collector_senders"),
             valueOf(m, "bpftrain_collector_frames_lost_total"),
             valueOf(m, "bpftrain_collector_kernel_drops_total"),
             valueOf(m, "bpftrain_step{job=\"soak\",rank=\"0\"}")};
    samples.push_back(s);
    std::printf(
        "t=%6.1fs rss=%6llu KiB fds=%3zu series=%6.0f senders=%5.0f lost=%.0f drops=%.0f "
        "rank0_step=%.0f\n",
        s.t_s, (unsigned long long)s.rss_kib, s.fds, s.series, s.senders, s.frames_lost,
        s.kernel_drops, s.steps);
    std::fflush(stdout);
  }
  stop = true;
  churn.join();
  EXPECT_EQ(train.exitCode(60s), 0) << train.err;

  // Flat once the first jobs' series (TTL) and senders (30 s idle) have had time to leave.
  const double warm = kSenderIdleS + kTtlS + 2 * sample_s;
  std::vector<Sample> late;
  for (const Sample& s : samples)
    if (s.t_s >= warm) late.push_back(s);
  ASSERT_GE(late.size(), 3u) << "soak too short for its warm-up of " << warm << " s";
  auto range = [&](auto field) {
    auto [lo, hi] =
        std::minmax_element(late.begin(), late.end(),
                            [&](const auto& a, const auto& b) { return field(a) < field(b); });
    return std::pair<double, double>{field(*lo), field(*hi)};
  };
  auto [rss_lo, rss_hi] = range([](const Sample& s) { return double(s.rss_kib); });
  auto [fd_lo, fd_hi] = range([](const Sample& s) { return double(s.fds); });
  auto [se_lo, se_hi] = range([](const Sample& s) { return s.series; });
  auto [sn_lo, sn_hi] = range([](const Sample& s) { return s.senders; });
  const double rss_drift =
      (double(late.back().rss_kib) - double(late.front().rss_kib)) / double(late.front().rss_kib);
  std::printf(
      "soak %d s, %d short jobs (%d distinct senders): after %.0f s RSS %.0f..%.0f KiB (drift "
      "%+.1f%%), fds %.0f..%.0f, series %.0f..%.0f, senders %.0f..%.0f\n",
      seconds, jobs.load(), jobs.load() * 50, warm, rss_lo, rss_hi, 100 * rss_drift, fd_lo, fd_hi,
      se_lo, se_hi, sn_lo, sn_hi);
  // Bounds: the live set is ~kSenderIdleS jobs of 50 senders and ~kTtlS jobs of series, so
  // anything that grows with the number of jobs seen would break these within a minute.
  EXPECT_LT(rss_drift, 0.10);
  // Open fds: no growth from the first third of the flat part to the last, by their medians (a
  // transient fd falls in either third: a 10-minute run had 145 only in the last). Not a range: the
  // sampled BPF run statistics hold one more fd 1 s in every 30 s, so single samples read +1 or
  // -2 around the usual count (30 min, 2026-12-03: 144 in 158 samples, 145 in 7, 142 in 15).
  {
    const size_t third = std::max<size_t>(1, late.size() / 3);
    std::vector<double> first, last;
    for (size_t i = 0; i < third; ++i) {
      first.push_back(double(late[i].fds));
      last.push_back(double(late[late.size() - 1 - i].fds));
    }
    std::sort(first.begin(), first.end());
    std::sort(last.begin(), last.end());
    EXPECT_LE(last[last.size() / 2], first[first.size() / 2]) << "open fds grew";
  }
  EXPECT_LE(fd_hi - fd_lo, 4);  // a leak per job (1,759 jobs in 30 min) would be thousands
  EXPECT_LE(se_hi, 1.5 * se_lo + 50);
  EXPECT_LE(sn_hi, 50.0 * (kSenderIdleS + 2 * sample_s + 2) + 2);
  EXPECT_GT(jobs.load(), seconds / 3);
  // The collector's log stays short while jobs come and go (a line per job would be thousands).
  const size_t log_lines = std::count(c.proc->err.begin(), c.proc->err.end(), '\n') +
                           std::count(c.proc->out.begin(), c.proc->out.end(), '\n');
  std::printf("collector log: %zu lines; the most frequent kinds:\n%s", log_lines,
              frequentLineKinds(c.proc->err + c.proc->out, 8).c_str());
  EXPECT_LT(log_lines, 100u + size_t(seconds) / 10) << "see the kinds above";
}

}  // namespace
}  // namespace bpftrain::faults
