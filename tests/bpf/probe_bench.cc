// bpftrain-probe-bench [--reps N] [--quick] [--no-bpftrace]: the probes' cost on event-heavy
// workloads and a training-like one. Each repetition runs every workload three ways, interleaved:
// no tracing, bpftrain's probes attached (all of them, targeting this process), and a bpftrace
// one-liner counting the same tracepoint per pid. Prints wall-time medians, slowdown ratios and
// BPF run time per event from bpf_stats (kernel.bpf_stats_enabled is on for the whole run).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "collector/ingest/sender_registry.h"
#include "collector/loader/probe_service.h"
#include "collector/window/series_store.h"
#include "common/clock.h"
#include "tests/bpf/workloads.h"
#include "tests/support/loopback.h"

namespace {

using namespace bpftrain;
using Clock = std::chrono::steady_clock;

struct ProgStats {
  uint64_t run_ns = 0, run_cnt = 0;
};

// run_time_ns/run_cnt of every loaded BPF program, by id.
std::map<uint32_t, ProgStats> allProgStats() {
  std::map<uint32_t, ProgStats> out;
  uint32_t id = 0;
  while (bpf_prog_get_next_id(id, &id) == 0) {
    int fd = bpf_prog_get_fd_by_id(id);
    if (fd < 0) continue;
    bpf_prog_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0) out[id] = {info.run_time_ns, info.run_cnt};
    close(fd);
  }
  return out;
}

ProgStats newProgsDelta(const std::map<uint32_t, ProgStats>& before) {
  ProgStats sum;
  for (const auto& [id, s] : allProgStats()) {
    if (before.count(id)) continue;
    sum.run_ns += s.run_ns;
    sum.run_cnt += s.run_cnt;
  }
  return sum;
}

// Loopback stream inside this process: a sender thread and a reader draining as fast as it can.
int64_t tcpStream(int64_t bytes) {
  int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  uint16_t port = 0;
  bpftrain::testing::bindLoopbackPort0(listener, &port);
  listen(listener, 1);
  int64_t got = 0;
  std::thread reader([&] {
    int conn = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
    std::vector<char> buf(1 << 20);
    ssize_t n;
    while (conn >= 0 && (n = read(conn, buf.data(), buf.size())) > 0) got += n;
    if (conn >= 0) close(conn);
  });
  tests::bpf::tcpSend(port, bytes);
  reader.join();
  close(listener);
  return got;
}

struct Workload {
  std::string name;
  std::string probe;             // our probe that sees its events
  std::string bpftrace;          // the comparison one-liner
  std::function<int64_t()> run;  // returns the number of workload events (for per-event cost)
  std::function<void()> poke;    // one small event, to see that bpftrace has attached
};

// Wall and process CPU (user + system, all threads) milliseconds of one call. CPU time is far
// less disturbed than wall time when other jobs share the cores; BPF programs that run in this
// process's context (faults, TCP send path) are part of it, ones that run elsewhere (the
// migration stopper, softirq on another task) are not.
struct Timing {
  double wall_ms = 0, cpu_ms = 0;
};

double cpuMs() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return (ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e3 +
         (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e3;
}

template <typename F>
Timing timed(F&& f) {
  const double c0 = cpuMs();
  const auto t0 = Clock::now();
  f();
  return {std::chrono::duration<double, std::milli>(Clock::now() - t0).count(), cpuMs() - c0};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

class Bpftrace {
 public:
  static bool available() {
    return access("/usr/bin/bpftrace", X_OK) == 0 || access("/usr/sbin/bpftrace", X_OK) == 0;
  }
  // Starts the one-liner and waits (deadline 20 s) until its program has run at least once.
  bool start(const std::string& program, const std::function<void()>& poke) {
    before_ = allProgStats();
    pid_ = fork();
    if (pid_ == 0) {
      int null = open("/dev/null", O_WRONLY);
      dup2(null, 1);
      dup2(null, 2);
      execlp("bpftrace", "bpftrace", "-e", program.c_str(), nullptr);
      _exit(127);
    }
    // run_cnt only moves while bpf_stats are on: hold them for the wait even under --no-stats.
    const int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
    struct CloseFd {
      int fd;
      ~CloseFd() {
        if (fd >= 0) close(fd);
      }
    } close_stats{stats_fd};
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      poke();
      if (newProgsDelta(before_).run_cnt > 0) {
        baseline_ = newProgsDelta(before_);
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  // Stats since start() returned.
  ProgStats since() const {
    ProgStats now = newProgsDelta(before_);
    return {now.run_ns - baseline_.run_ns, now.run_cnt - baseline_.run_cnt};
  }
  ~Bpftrace() {
    if (pid_ > 0) {
      kill(pid_, SIGINT);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_ = -1;
  std::map<uint32_t, ProgStats> before_;
  ProgStats baseline_;
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  bool quick = false, with_bpftrace = true, verbose = false, stats = true;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--no-bpftrace"))
      with_bpftrace = false;
    else if (!std::strcmp(argv[i], "--verbose"))
      verbose = true;
    else if (!std::strcmp(argv[i], "--no-stats"))
      stats = false;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--quick] [--no-bpftrace] [--verbose] [--no-stats]\n",
                   argv[0]);
      return 2;
    }
  }
  if (quick) reps = std::min(reps, 2);
  if (geteuid() != 0) {
    std::fprintf(stderr, "bpftrain-probe-bench: needs root (CAP_BPF + CAP_PERFMON)\n");
    return 2;
  }
  if (with_bpftrace && !Bpftrace::available()) {
    std::fprintf(stderr,
                 "bpftrain-probe-bench: bpftrace not installed: comparison skipped "
                 "(apt-get install bpftrace)\n");
    with_bpftrace = false;
  }
  // bpf_stats time every program run (two clock reads each); --no-stats measures the slowdown
  // without that cost, and then has no ns/event.
  const int stats_fd = stats ? bpf_enable_stats(BPF_STATS_RUN_TIME) : -1;
  if (stats && stats_fd < 0) std::fprintf(stderr, "bpf_stats unavailable: no per-event cost\n");
  const int scale = quick ? 10 : 1;
  std::vector<Workload> workloads = {
      {"forced migrations", "migrations",
       "tracepoint:sched:sched_migrate_task { @[pid] = count(); }",
       [&] {
         const int64_t n = tests::bpf::migrateSelf(20000 / scale);
         cpu_set_t all;
         CPU_ZERO(&all);
         for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
         sched_setaffinity(0, sizeof(all), &all);
         return n;
       },
       [] { tests::bpf::migrateSelf(2); }},
      {"page-fault storm", "page_faults",
       "tracepoint:exceptions:page_fault_user { @[pid] = count(); }",
       [&] {
         int64_t n = 0;
         for (int i = 0; i < 40 / scale; ++i) n += tests::bpf::touchFreshPages(10000);
         return n;
       },
       [] { tests::bpf::touchFreshPages(4); }},
      {"TCP loopback stream", "tcp", "tracepoint:tcp:tcp_probe { @[pid] = count(); }",
       [&] { return tcpStream((512LL << 20) / scale) / (64 << 10); },  // events: 64 KiB writes
       [] { tcpStream(1 << 20); }},
      {"training-like", "page_faults",
       "tracepoint:exceptions:page_fault_user { @[pid] = count(); }",
       [&] {
         int64_t steps = 0;
         for (int i = 0; i < 100 / scale; ++i) {
           steps += tests::bpf::trainingLike(4);
           tests::bpf::touchFreshPages(64);  // per-step allocator churn
         }
         return steps;
       },
       [] { tests::bpf::touchFreshPages(4); }},
  };

  // Ratios are medians over the repetitions: probes (ours) and bpftrace against no tracing.
  std::printf("%-20s %9s %8s %8s %9s %8s %8s %10s %10s %10s\n", "workload", "wall ms", "ours",
              "bpftrace", "cpu ms", "ours", "bpftrace", "ns/event", "ns/event", "bpftrace");
  std::printf("%-20s %9s %8s %8s %9s %8s %8s %10s %10s %10s\n", "", "(base)", "wall x", "wall x",
              "(base)", "cpu x", "cpu x", "(probe)", "(all)", "ns/event");
  for (auto& w : workloads) {
    std::vector<double> base, ours, theirs, base_cpu, ours_cpu, theirs_cpu;
    double our_probe_ns = 0, our_probe_cnt = 0, our_all_ns = 0;
    uint64_t their_ns = 0, their_cnt = 0;
    int64_t workload_events = 0;
    for (int r = 0; r < reps; ++r) {
      {
        const Timing t = timed([&] { w.run(); });
        base.push_back(t.wall_ms);
        base_cpu.push_back(t.cpu_ms);
      }
      {
        auto store = collector::window::SeriesStore::create({});
        collector::ingest::SenderRegistry registry;
        collector::loader::ProbeOptions options;
        options.pids = {getpid()};
        options.bpf_stats = stats;
        std::string error;
        auto service = collector::loader::ProbeService::create(options, *store, 0, error);
        if (!service) {
          std::fprintf(stderr, "probes: %s\n", error.c_str());
          return 1;
        }
        // bpf_stats deltas as the service exports them (bpftrain_probe_run_seconds_total,
        // bpftrain_probe_runs_total): totals after the workload minus totals before it.
        auto totals = [&](const char* metric, bool only_probe) {
          double sum = 0;
          for (const auto& snap : store->snapshot(monotonicNowNs())) {
            if (snap.name != metric) continue;
            for (const auto& [k, v] : snap.labels)
              if (k == "probe" && (!only_probe || v == w.probe)) sum += snap.total;
          }
          return sum;
        };
        service->poll(registry, monotonicNowNs());
        const double ns0 = totals("bpftrain_probe_run_seconds", true);
        const double cnt0 = totals("bpftrain_probe_runs", true);
        const double all0 = totals("bpftrain_probe_run_seconds", false);
        const Timing t = timed([&] { workload_events += w.run(); });
        ours.push_back(t.wall_ms);
        ours_cpu.push_back(t.cpu_ms);
        service->poll(registry, monotonicNowNs());
        our_probe_ns += (totals("bpftrain_probe_run_seconds", true) - ns0) * 1e9;
        our_probe_cnt += totals("bpftrain_probe_runs", true) - cnt0;
        our_all_ns += (totals("bpftrain_probe_run_seconds", false) - all0) * 1e9;
        if (verbose) {
          // Cumulative since load (load takes ~0.3 s, the workload most of the rest).
          std::map<std::string, std::pair<double, double>> per;
          for (const auto& snap : store->snapshot(monotonicNowNs()))
            for (const auto& [k, v] : snap.labels)
              if (k == "probe" && snap.name == "bpftrain_probe_run_seconds")
                per[v].first += snap.total;
              else if (k == "probe" && snap.name == "bpftrain_probe_runs")
                per[v].second += snap.total;
          for (const auto& [probe, p] : per)
            if (p.second > 0)
              std::printf("  %-18s %-16s runs %10.0f  %7.1f ns/run\n", w.name.c_str(),
                          probe.c_str(), p.second, p.first * 1e9 / p.second);
        }
      }
      if (with_bpftrace) {
        Bpftrace bt;
        if (!bt.start(w.bpftrace, w.poke)) {
          std::fprintf(stderr, "bpftrace did not attach within 20 s: comparison skipped\n");
          with_bpftrace = false;
          continue;
        }
        const Timing t = timed([&] { w.run(); });
        theirs.push_back(t.wall_ms);
        theirs_cpu.push_back(t.cpu_ms);
        const ProgStats s = bt.since();
        their_ns += s.run_ns;
        their_cnt += s.run_cnt;
      }
    }
    const double b = median(base), o = median(ours), t = median(theirs);
    const double bc = median(base_cpu), oc = median(ours_cpu), tc = median(theirs_cpu);
    // ns/event (probe): the probe's own programs per run. ns/event (all probes): every attached
    // program's run time (other probes fire on the same workload) per probe event.
    std::printf("%-20s %9.1f %8.3f %8.3f %9.1f %8.3f %8.3f %10.1f %10.1f %10.1f\n", w.name.c_str(),
                b, o / b, t > 0 ? t / b : 0.0, bc, bc > 0 ? oc / bc : 0.0,
                bc > 0 && tc > 0 ? tc / bc : 0.0,
                our_probe_cnt ? our_probe_ns / our_probe_cnt : 0.0,
                our_probe_cnt ? our_all_ns / our_probe_cnt : 0.0,
                their_cnt ? double(their_ns) / their_cnt : 0.0);
    std::fflush(stdout);
    (void)workload_events;
  }
  if (stats_fd >= 0) close(stats_fd);
  return 0;
}
