// bpftrain-probe-bench [--reps N] [--blocks N] [--workload NAME] [--quick] [--no-bpftrace]: the
// probes' cost on event-heavy workloads and a training-like one. Each repetition runs every
// workload six ways, interleaved: no tracing (A), empty programs on the probes' tracepoints
// (bpf/bench_empty.bpf.c), bpftrain's probes attached (all of them, targeting this process), both
// attached together (paired: the per-event ratio's own segment), no tracing again (A', the A/A
// noise floor), and a bpftrace one-liner counting the same tracepoint per pid. Prints median CPU
// and wall times as ratios to A, and per probe its BPF run time per event against the empty
// program's on the same tracepoint in the same run (bpf_stats, on for the whole run; each probe
// on the workload that storms its tracepoint). Then the slowdown goals in blocks
// (slowdownBlocks), which resolve what the repetitions cannot. --variants prices only ways to find
// a task's slot and the parts of a probe's cost (slotVariants). page_faults of a process target
// has no program (the collector reads /proc/PID/stat): its line shows the empty program a
// per-fault program would cost at least, and the read's own cost is printed.
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "bench_empty.skel.h"
#include "collector/ingest/sender_registry.h"
#include "collector/loader/probe_service.h"
#include "collector/loader/tgid_slot_table.h"
#include "collector/window/series_store.h"
#include "common/clock.h"
#include "tests/bpf/workloads.h"
#include "tests/support/bootstrap.h"
#include "tests/support/loopback.h"

namespace {

using namespace bpftrain;
using collector::loader::Status;
using collector::loader::TgidSlotTable;
using Clock = std::chrono::steady_clock;

struct ProgStats {
  uint64_t run_ns = 0, run_cnt = 0;
};

// Back on every CPU after a workload that pinned this thread.
void unpinSelf() {
  cpu_set_t all;
  CPU_ZERO(&all);
  for (int c = 0; c < CPU_SETSIZE; ++c) CPU_SET(c, &all);
  sched_setaffinity(0, sizeof(all), &all);
}

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

// One probe of ours that a workload exercises and the empty programs on its tracepoints.
struct ProbeFloor {
  std::string probe;
  std::vector<std::string> empties;  // bench_empty program names
};

struct Workload {
  std::string name;
  std::string probe;               // our program that sees its events (the ns/event columns)
  std::vector<ProbeFloor> floors;  // the probes priced against empty programs
  std::string bpftrace;            // the comparison one-liner
  std::function<int64_t()> run;    // returns the number of workload events (for per-event cost)
  std::function<void()> poke;      // one small event, to see that bpftrace has attached
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

ProgStats progStats(const bpf_program* prog) {
  bpf_prog_info info{};
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) != 0) return {};
  return {info.run_time_ns, info.run_cnt};
}

using bpftrain::testing::median;

// One probe of ours priced against the empty programs on its tracepoints, over a workload's
// repetitions.
struct FloorLine {
  std::string workload, probe;
  double probe_ns = 0, probe_runs = 0, empty_ns = 0, empty_runs = 0;  // separate segments
  std::vector<double> paired;  // per repetition, attached together: probe ns/run over empty's
};

// The empty programs on exactly the tracepoints of a workload's priced probes, attached while
// this lives; collect() adds their bpf_stats since then to each floor's empty figures.
class EmptyPrograms {
 public:
  EmptyPrograms(bpf_object* obj, const std::vector<ProbeFloor>& floors) {
    for (size_t i = 0; i < floors.size(); ++i)
      for (const auto& name : floors[i].empties)
        if (bpf_program* p = bpf_object__find_program_by_name(obj, name.c_str())) {
          bpf_link* link = bpf_program__attach(p);
          if (!link) std::fprintf(stderr, "cannot attach %s\n", bpf_program__name(p));
          attached_.push_back({p, i, link, progStats(p)});
        }
  }
  EmptyPrograms(const EmptyPrograms&) = delete;
  EmptyPrograms& operator=(const EmptyPrograms&) = delete;
  ~EmptyPrograms() {
    for (const auto& a : attached_)
      if (a.link) bpf_link__destroy(a.link);
  }
  void collect(std::vector<FloorLine>& floors) const {
    for (const auto& a : attached_) {
      const ProgStats after = progStats(a.prog);
      floors[a.floor].empty_ns += double(after.run_ns - a.before.run_ns);
      floors[a.floor].empty_runs += double(after.run_cnt - a.before.run_cnt);
    }
  }

 private:
  struct Attached {
    bpf_program* prog;
    size_t floor;
    bpf_link* link;
    ProgStats before;
  };
  std::vector<Attached> attached_;
};

// The collector's probes, every one (those off by default included), targeting this process.
std::unique_ptr<collector::loader::ProbeService> allProbes(collector::window::SeriesStore& store,
                                                           bool stats) {
  collector::loader::ProbeOptions options;
  options.pids = {getpid()};
  options.enabled = {"thp_faults"};
  options.run_stats.mode =
      stats ? collector::loader::RunStatsMode::kOn : collector::loader::RunStatsMode::kOff;
  std::string error;
  auto service = collector::loader::ProbeService::create(options, store, 0, error);
  if (!service) std::fprintf(stderr, "probes: %s\n", error.c_str());
  return service;
}

// bpf_stats deltas as the service exports them (bpftrain_probe_run_seconds_total,
// bpftrain_probe_runs_total): totals at collect() minus totals at construction, for the
// workload's own probe and for each priced one.
class ProbeTotals {
 public:
  ProbeTotals(collector::loader::ProbeService& service, collector::ingest::SenderRegistry& registry,
              collector::window::SeriesStore& store, std::string probe,
              const std::vector<FloorLine>& floors)
      : service_(service), registry_(registry), store_(store), probe_(std::move(probe)) {
    service_.poll(registry_, monotonicNowNs());
    start_ = {total("bpftrain_probe_run_seconds", probe_), total("bpftrain_probe_runs", probe_)};
    for (const auto& f : floors)
      floor_start_.emplace_back(total("bpftrain_probe_run_seconds", f.probe),
                                total("bpftrain_probe_runs", f.probe));
  }
  // Adds the workload probe's run time (ns) and runs since construction to `ns` and `runs`, and
  // each priced probe's to its floor.
  void collect(double& ns, double& runs, std::vector<FloorLine>& floors) {
    service_.poll(registry_, monotonicNowNs());
    ns += (total("bpftrain_probe_run_seconds", probe_) - start_.first) * 1e9;
    runs += total("bpftrain_probe_runs", probe_) - start_.second;
    for (size_t i = 0; i < floors.size(); ++i) {
      floors[i].probe_ns +=
          (total("bpftrain_probe_run_seconds", floors[i].probe) - floor_start_[i].first) * 1e9;
      floors[i].probe_runs +=
          total("bpftrain_probe_runs", floors[i].probe) - floor_start_[i].second;
    }
  }

 private:
  double total(const char* metric, const std::string& probe) const {
    double sum = 0;
    for (const auto& snap : store_.snapshot(monotonicNowNs())) {
      if (snap.name != metric) continue;
      for (const auto& [k, v] : snap.labels)
        if (k == "probe" && v == probe) sum += snap.total;
    }
    return sum;
  }

  collector::loader::ProbeService& service_;
  collector::ingest::SenderRegistry& registry_;
  collector::window::SeriesStore& store_;
  std::string probe_;
  std::pair<double, double> start_;
  std::vector<std::pair<double, double>> floor_start_;
};

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

// --variants: ways to find a task's slot (bpf/bench_empty.bpf.c), each with a counter, and the
// parts of a migration probe's cost one at a time, against the empty program on the same
// tracepoint: on page_fault_user during the fault storm and on sched_migrate_task during forced
// migrations, with this process a target (slot 1) and then not. Each repetition runs the
// variants in a random order; "median x" is the median over repetitions of each one's ratio to
// that repetition's empty program.
struct VariantGroup {
  const char* workload;
  std::vector<bpf_program*> progs;  // the empty program first
  std::function<void()> run;
};

int slotVariants(bench_empty_bpf* empty, TgidSlotTable& table, int reps, int scale) {
  const uint32_t tgid = static_cast<uint32_t>(getpid()), slot = 1;
  const int pidfd = static_cast<int>(syscall(SYS_pidfd_open, getpid(), 0));  // this (main) thread
  if (pidfd < 0) {
    std::fprintf(stderr, "pidfd_open: %s\n", std::strerror(errno));
    return 1;
  }
  const int memo_tgids = bpf_map__fd(empty->maps.memo_tgids);
  const int tasks = bpf_map__fd(empty->maps.task_slots);
  const VariantGroup groups[] = {
      {"page-fault storm",
       {empty->progs.empty_page_fault_user, empty->progs.slot_table, empty->progs.slot_memo,
        empty->progs.slot_task_storage},
       [&] {
         for (int i = 0; i < 40 / scale; ++i) tests::bpf::touchFreshPages(10000);
       }},
      {"forced migrations",
       {empty->progs.empty_sched_migrate_task, empty->progs.migrate_table,
        empty->progs.migrate_memo, empty->progs.migrate_tgid_only, empty->progs.migrate_slot_only,
        empty->progs.migrate_counter_only, empty->progs.migrate_bucket},
       [&] {
         tests::bpf::migrateSelf(20000 / scale);
         unpinSelf();
       }},
      {"TLB shootdowns",
       {empty->progs.empty_tlb_flush, empty->progs.tlb_table, empty->progs.tlb_bucket},
       [&] {
         tests::bpf::tlbShootdowns(40000 / scale);
         unpinSelf();
       }},
  };
  std::printf("%-24s %-18s %-8s %10s %10s %8s %8s\n", "variant", "workload", "task", "runs",
              "ns/run", "x empty", "median x");
  for (const bool target : {true, false}) {
    if (target) {
      if (Status status = table.insert(tgid, slot, /*only_new=*/false); !status.ok()) {
        std::fprintf(stderr, "%s\n", status.message().c_str());
        return 1;
      }
      bpf_map_update_elem(memo_tgids, &tgid, &slot, BPF_ANY);
      bpf_map_update_elem(tasks, &pidfd, &slot, BPF_ANY);
      std::vector<std::array<uint64_t, 4>> bucket(libbpf_num_possible_cpus(),
                                                  {tgid | (uint64_t{slot} << 32), 0, 0, 0});
      const uint32_t bucket_key = (tgid * 2654435761u) >> 22;  // as migrate_bucket hashes
      bpf_map_update_elem(bpf_map__fd(empty->maps.buckets), &bucket_key, bucket.data(), BPF_ANY);
    } else {
      (void)table.erase(tgid, slot);
      bpf_map_delete_elem(memo_tgids, &tgid);
      bpf_map_delete_elem(tasks, &pidfd);
    }
    ++empty->data_memo->memo_generation;  // the memo looks again
    for (const VariantGroup& group : groups) {
      std::vector<ProgStats> sum(group.progs.size());
      // Per repetition, the variants in a random order, each as a ratio to that repetition's
      // empty program: a slow stretch of the shared host moves a repetition, not the pairing.
      std::vector<std::vector<double>> ratios(group.progs.size());
      std::vector<size_t> order(group.progs.size());
      std::mt19937 shuffle_rng(12345);
      for (int r = 0; r < reps; ++r) {
        std::iota(order.begin(), order.end(), size_t{0});
        std::shuffle(order.begin(), order.end(), shuffle_rng);
        std::vector<double> rep_ns(group.progs.size(), 0);
        for (size_t v : order) {
          bpf_link* link = bpf_program__attach(group.progs[v]);
          if (!link) {
            std::fprintf(stderr, "cannot attach %s\n", bpf_program__name(group.progs[v]));
            return 1;
          }
          const ProgStats before = progStats(group.progs[v]);
          group.run();
          const ProgStats after = progStats(group.progs[v]);
          bpf_link__destroy(link);
          sum[v].run_ns += after.run_ns - before.run_ns;
          sum[v].run_cnt += after.run_cnt - before.run_cnt;
          if (after.run_cnt > before.run_cnt)
            rep_ns[v] = double(after.run_ns - before.run_ns) / (after.run_cnt - before.run_cnt);
        }
        for (size_t v = 0; v < group.progs.size(); ++v)
          if (rep_ns[0] > 0 && rep_ns[v] > 0) ratios[v].push_back(rep_ns[v] / rep_ns[0]);
      }
      auto per = [&](size_t v) {
        return sum[v].run_cnt ? double(sum[v].run_ns) / sum[v].run_cnt : 0;
      };
      for (size_t v = 0; v < group.progs.size(); ++v)
        std::printf("%-24s %-18s %-8s %10llu %10.1f %8.2f %8.2f\n",
                    bpf_program__name(group.progs[v]), group.workload, target ? "target" : "other",
                    static_cast<unsigned long long>(sum[v].run_cnt), per(v),
                    per(0) > 0 ? per(v) / per(0) : 0.0, median(ratios[v]));
    }
  }
  close(pidfd);
  return 0;
}

// --blocks N: the slowdown goals as the issue states them (CPU with the probes attached over CPU
// without), resolved where the repetitions above are not. Each block runs four segments of a
// workload in a random order -- A1 and A2 with nothing attached, B with the collector's default
// probes targeting this process, C with `flip` (--flip, default thp_faults: the fault path's one
// program, on every page allocation, off by default) switched the other way -- each service
// loaded before its segment, so loading is not timed, on CPU 0, in this thread's CPU time, which
// holds the fault path's programs. Per block (B - A1) / A1 is the slowdown, (C - A1) / A1 the
// same with that probe flipped and (A2 - A1) / A1 the design with nothing attached (A/A); a slow
// stretch of the shared host moves a block, not the pairing. Prints the median of each with a
// bootstrap 95% interval.
struct BlockWorkload {
  const char* name;
  double goal;  // the slowdown allowed, as a ratio
  std::function<void()> segment;
};

double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

int slowdownBlocks(int blocks, bool stats, int scale, const std::string& flip) {
  const bool flip_on = !collector::loader::ProbeService::offByDefault(flip).empty();
  const std::string flipped = (flip_on ? "with " : "without ") + flip;
  const BlockWorkload workloads[] = {
      {"page-fault storm", 1.03,
       [scale] {
         for (int i = 0; i < 10 / std::min(scale, 10); ++i) tests::bpf::touchFreshPages(10000);
       }},
      {"training-like", 1.01,
       [scale] {
         for (int i = 0; i < 100 / std::min(scale, 100); ++i) {
           tests::bpf::trainingLike(4);
           tests::bpf::touchFreshPages(64);
         }
       }},
  };
  if (!tests::bpf::pinSelf(0)) {
    std::fprintf(stderr, "probes: cannot pin to CPU 0 for the blocks\n");
    return 1;
  }
  std::mt19937_64 rng(20261203);
  std::printf(
      "\nslowdown in %d blocks of A1/A2/B/C in random order (CPU 0, thread CPU time, "
      "bpf_stats %s; B: the collector's default probes, C: %s):\n%-18s %-25s %-25s %-25s %6s "
      "%s\n",
      blocks, stats ? "on" : "off", flipped.c_str(), "workload", "defaults x (95%)",
      (flipped + " x (95%)").c_str(), "A/A x (95%)", "goal", "verdict (defaults)");
  for (const BlockWorkload& w : workloads) {
    w.segment();  // warm-up: the allocator's and the page cache's first touch is not the cost
    std::vector<double> ab, ac, aa;
    int order[4] = {0, 1, 2, 3};  // 0: A1, 1: A2, 2: B, 3: C
    for (int b = 0; b < blocks; ++b) {
      std::shuffle(std::begin(order), std::end(order), rng);
      double ms[4] = {};
      for (int segment : order) {
        std::unique_ptr<collector::window::SeriesStore> store;
        std::unique_ptr<collector::loader::ProbeService> service;
        if (segment >= 2) {
          store = collector::window::SeriesStore::create({});
          collector::loader::ProbeOptions options;
          options.pids = {getpid()};
          if (segment == 3 && flip_on) options.enabled = {flip};
          if (segment == 3 && !flip_on) options.disabled = {flip};
          // This process already holds them on (or off) as asked.
          options.run_stats.mode = collector::loader::RunStatsMode::kOff;
          std::string error;
          service = collector::loader::ProbeService::create(options, *store, 0, error);
          if (!service) {
            std::fprintf(stderr, "probes: %s\n", error.c_str());
            return 1;
          }
        }
        const double t0 = threadCpuMs();
        w.segment();
        ms[segment] = threadCpuMs() - t0;
      }
      ab.push_back(ms[2] / ms[0]);
      ac.push_back(ms[3] / ms[0]);
      aa.push_back(ms[1] / ms[0]);
    }
    const auto all = testing::bootstrapMedian(ab, rng), but = testing::bootstrapMedian(ac, rng),
               floor = testing::bootstrapMedian(aa, rng);
    // Met when the whole interval is under the goal; missed when it is all over; else unresolved.
    const char* verdict = all.hi <= w.goal ? "met" : all.lo > w.goal ? "not met" : "unresolved";
    auto cell = [](const testing::Interval& i) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.4f (%.4f-%.4f)", i.median, i.lo, i.hi);
      return std::string(buf);
    };
    std::printf("%-18s %-25s %-25s %-25s %6.2f %s\n", w.name, cell(all).c_str(), cell(but).c_str(),
                cell(floor).c_str(), w.goal, verdict);
    std::fflush(stdout);
  }
  unpinSelf();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  int blocks = 20;
  std::string only;                 // --workload: the table's workloads whose name contains it
  std::string flip = "thp_faults";  // --flip: the blocks' C segment switches it the other way
  bool quick = false, with_bpftrace = true, verbose = false, stats = true, variants = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--quick"))
      quick = true;
    else if (!std::strcmp(argv[i], "--no-bpftrace"))
      with_bpftrace = false;
    else if (!std::strcmp(argv[i], "--verbose"))
      verbose = true;
    else if (!std::strcmp(argv[i], "--no-stats"))
      stats = false;
    else if (!std::strcmp(argv[i], "--variants"))
      variants = true;
    else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--blocks") && i + 1 < argc)
      blocks = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--workload") && i + 1 < argc)
      only = argv[++i];
    else if (!std::strcmp(argv[i], "--flip") && i + 1 < argc)
      flip = argv[++i];
    else {
      std::fprintf(stderr,
                   "usage: %s [--reps N] [--blocks N] [--flip PROBE] [--workload NAME] [--quick] "
                   "[--no-bpftrace] "
                   "[--verbose] [--no-stats] [--variants]\n",
                   argv[0]);
      return 2;
    }
  }
  if (quick) {
    reps = std::min(reps, 2);
    blocks = std::min(blocks, 3);
  }
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
  auto table = TgidSlotTable::create();
  if (!table.ok()) {
    std::fprintf(stderr, "bpftrain-probe-bench: %s\n", table.status().message().c_str());
    return 1;
  }
  bench_empty_bpf* empty = bench_empty_bpf__open();
  if (empty && (!table.value().reuseIn(empty->maps.target_tgid_slots).ok() ||
                bench_empty_bpf__load(empty) != 0)) {
    bench_empty_bpf__destroy(empty);
    empty = nullptr;
  }
  if (!empty) {
    std::fprintf(stderr, "bpftrain-probe-bench: cannot load bench_empty.bpf.o: %s\n",
                 std::strerror(errno));
    return 1;
  }
  if (variants) {
    const int status = slotVariants(empty, table.value(), reps, scale);
    bench_empty_bpf__destroy(empty);
    if (stats_fd >= 0) close(stats_fd);
    return status;
  }
  const ProbeFloor kFaultPath[] = {{"page_faults", {"empty_page_fault_user"}},
                                   {"thp_faults", {"empty_mm_page_alloc"}},
                                   {"tlb_flush", {"empty_tlb_flush"}}};
  std::vector<Workload> workloads = {
      {"forced migrations",
       "migrations",
       {{"migrations", {"empty_sched_migrate_task"}}},
       "tracepoint:sched:sched_migrate_task { @[pid] = count(); }",
       [&] {
         const int64_t n = tests::bpf::migrateSelf(20000 / scale);
         unpinSelf();
         return n;
       },
       [] { tests::bpf::migrateSelf(2); }},
      {"page-fault storm",
       "thp_faults",  // the fault path's one program (page_faults of a process: /proc)
       {std::begin(kFaultPath), std::end(kFaultPath)},
       "tracepoint:exceptions:page_fault_user { @[pid] = count(); }",
       [&] {
         int64_t n = 0;
         for (int i = 0; i < 40 / scale; ++i) n += tests::bpf::touchFreshPages(10000);
         return n;
       },
       [] { tests::bpf::touchFreshPages(4); }},
      {"TCP loopback stream",
       "tcp",
       {{"tcp", {"empty_tcp_sendmsg_locked", "empty_tcp_probe", "empty_tcp_retransmit_skb"}}},
       "tracepoint:tcp:tcp_probe { @[pid] = count(); }",
       [&] { return tcpStream((512LL << 20) / scale) / (64 << 10); },  // events: 64 KiB writes
       [] { tcpStream(1 << 20); }},
      // tlb_flush's own storm: in the fault storm it fires once per munmap (1 in ~36 faults),
      // so there its per-event cost is that of cold caches, not of the program.
      {"TLB shootdowns",
       "tlb_flush",
       {{"tlb_flush", {"empty_tlb_flush"}}},
       "tracepoint:tlb:tlb_flush { @[pid] = count(); }",
       [&] {
         const int64_t n = tests::bpf::tlbShootdowns(40000 / scale);
         unpinSelf();
         return n;
       },
       [] {
         tests::bpf::tlbShootdowns(4);
         unpinSelf();
       }},
      {"training-like",
       "thp_faults",
       {std::begin(kFaultPath), std::end(kFaultPath)},
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

  // Ratios are medians over the repetitions against no tracing (A): A' (the A/A noise floor),
  // empty programs, our probes, bpftrace.
  std::printf("%-20s %8s %7s %7s %7s %8s | %8s %7s %7s %8s | %9s %9s\n", "workload", "cpu ms",
              "A'/A", "empty", "ours", "bpftrace", "wall ms", "A'/A", "ours", "bpftrace",
              "ns/event", "ns/event");
  std::printf("%-20s %8s %7s %7s %7s %8s | %8s %7s %7s %8s | %9s %9s\n", "", "(A)", "cpu x",
              "cpu x", "cpu x", "cpu x", "(A)", "wall x", "wall x", "wall x", "(probe)",
              "(bpftrace)");
  std::vector<FloorLine> floor_lines;
  struct Share {
    std::string workload;
    double probes = 0, empty = 0;  // % of A's CPU time
  };
  std::vector<Share> shares;
  std::erase_if(workloads,
                [&](const Workload& w) { return w.name.find(only) == std::string::npos; });
  for (auto& w : workloads) {
    std::vector<double> base, again, emp, ours, theirs, base_cpu, again_cpu, emp_cpu, ours_cpu,
        theirs_cpu;
    double our_probe_ns = 0, our_probe_cnt = 0;
    uint64_t their_ns = 0, their_cnt = 0;
    std::vector<FloorLine> floors;
    for (const auto& f : w.floors) floors.push_back({w.name, f.probe, 0, 0, 0, 0, {}});
    for (int r = 0; r < reps; ++r) {
      {
        const Timing t = timed([&] { w.run(); });
        base.push_back(t.wall_ms);
        base_cpu.push_back(t.cpu_ms);
      }
      {
        EmptyPrograms empties(empty->obj, w.floors);
        const Timing t = timed([&] { w.run(); });
        emp.push_back(t.wall_ms);
        emp_cpu.push_back(t.cpu_ms);
        empties.collect(floors);
      }
      {
        auto store = collector::window::SeriesStore::create({});
        collector::ingest::SenderRegistry registry;
        auto service = allProbes(*store, stats);
        if (!service) return 1;
        ProbeTotals probes(*service, registry, *store, w.probe, floors);
        const Timing t = timed([&] { w.run(); });
        ours.push_back(t.wall_ms);
        ours_cpu.push_back(t.cpu_ms);
        probes.collect(our_probe_ns, our_probe_cnt, floors);
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
      {
        // Paired: the probes and the empty programs on the same tracepoints at once, so both
        // see the same events in the same state of the shared host; which one the tracepoint
        // calls first alternates between repetitions.
        auto store = collector::window::SeriesStore::create({});
        collector::ingest::SenderRegistry registry;
        std::optional<EmptyPrograms> empties;
        if (r % 2) empties.emplace(empty->obj, w.floors);
        auto service = allProbes(*store, stats);
        if (!service) return 1;
        if (!empties) empties.emplace(empty->obj, w.floors);
        std::vector<FloorLine> pair = floors;
        for (auto& f : pair) f.probe_ns = f.probe_runs = f.empty_ns = f.empty_runs = 0;
        ProbeTotals probes(*service, registry, *store, w.probe, pair);
        w.run();
        double unused_ns = 0, unused_cnt = 0;
        probes.collect(unused_ns, unused_cnt, pair);
        empties->collect(pair);
        for (size_t i = 0; i < floors.size(); ++i)
          if (pair[i].probe_runs > 0 && pair[i].empty_runs > 0 && pair[i].empty_ns > 0)
            floors[i].paired.push_back((pair[i].probe_ns / pair[i].probe_runs) /
                                       (pair[i].empty_ns / pair[i].empty_runs));
      }
      {
        const Timing t = timed([&] { w.run(); });
        again.push_back(t.wall_ms);
        again_cpu.push_back(t.cpu_ms);
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
    const double b = median(base), a = median(again), o = median(ours), t = median(theirs);
    const double bc = median(base_cpu), ac = median(again_cpu), ec = median(emp_cpu),
                 oc = median(ours_cpu), tc = median(theirs_cpu);
    auto ratio = [](double x, double y) { return y > 0 && x > 0 ? x / y : 0.0; };
    std::printf("%-20s %8.1f %7.3f %7.3f %7.3f %8.3f | %8.1f %7.3f %7.3f %8.3f | %9.1f %9.1f\n",
                w.name.c_str(), bc, ratio(ac, bc), ratio(ec, bc), ratio(oc, bc), ratio(tc, bc), b,
                ratio(a, b), ratio(o, b), ratio(t, b),
                our_probe_cnt ? our_probe_ns / our_probe_cnt : 0.0,
                their_cnt ? double(their_ns) / their_cnt : 0.0);
    std::fflush(stdout);
    // The same cost from bpf_stats, which the sharing of the cores disturbs far less than CPU
    // time: our programs' run time on this workload's tracepoints as a share of A's CPU time
    // (an upper bound: it includes bpf_stats' own two clock reads per run), and the empty ones'.
    double probe_ns = 0, empty_ns = 0;
    for (const auto& f : floors) {
      probe_ns += f.probe_ns;
      empty_ns += f.empty_ns;
    }
    if (!floors.empty() && bc > 0)
      shares.push_back(
          {w.name, 100 * probe_ns / (bc * 1e6 * reps), 100 * empty_ns / (bc * 1e6 * reps)});
    for (auto& f : floors) floor_lines.push_back(f);
  }
  std::printf("\n%-20s %14s %14s\n", "workload", "probes % cpu", "empty % cpu");
  for (const auto& sh : shares)
    std::printf("%-20s %13.2f%% %13.2f%%\n", sh.workload.c_str(), sh.probes, sh.empty);
  // Each probe against an empty program on the same tracepoint(s), the same workload, this run:
  // "x empty" from separate segments (a program alone on its events), "paired" with both
  // attached together (the goal's figure: same events, same state of the host), the median over
  // repetitions with its bootstrap 95% interval; "met" only when the whole interval is <= 1.5.
  std::printf("\n%-20s %-12s %10s %10s %10s %8s %8s %15s %s\n", "workload", "probe", "runs",
              "ns/run", "empty ns", "x empty", "paired x", "95% interval", "goal <= 1.5");
  std::mt19937_64 floor_rng(7);
  for (const auto& f : floor_lines) {
    const double p = f.probe_runs ? f.probe_ns / f.probe_runs : 0;
    const double e = f.empty_runs ? f.empty_ns / f.empty_runs : 0;
    if (f.probe_runs == 0) {  // page_faults of a process target: read from /proc, no program
      std::printf("%-20s %-12s %10s %10s %10.1f %8s\n", f.workload.c_str(), f.probe.c_str(), "0",
                  "-", e, "none");
      continue;
    }
    const auto paired = bpftrain::testing::bootstrapMedian(f.paired, floor_rng);
    std::printf("%-20s %-12s %10.0f %10.1f %10.1f %8.2f %8.2f %7.2f..%-7.2f %s\n",
                f.workload.c_str(), f.probe.c_str(), f.probe_runs, p, e, e > 0 ? p / e : 0.0,
                paired.median, paired.lo, paired.hi,
                f.paired.empty()   ? "-"
                : paired.hi <= 1.5 ? "met"
                : paired.lo > 1.5  ? "not met"
                                   : "unresolved");
  }
  // What page_faults costs instead: the collector reads each target process's /proc/PID/stat
  // once per step. This process's, as often as the timing needs.
  {
    constexpr int kReads = 2000;
    const int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    char buf[1024];
    ssize_t got = 0;
    const auto t0 = Clock::now();
    for (int i = 0; i < kReads && fd >= 0; ++i) got += pread(fd, buf, sizeof(buf), 0);
    const double us = std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / kReads;
    if (fd >= 0) close(fd);
    if (got > 0)
      std::printf("page_faults from /proc/PID/stat: %.1f us per process per step (%d reads)\n", us,
                  kReads);
  }
  std::printf(
      "goals: page-fault storm ours cpu x <= 1.03, training-like <= 1.01, each probe <= 1.50 x "
      "empty; A'/A is the noise floor of this run\n");
  const int blocks_status = blocks > 0 ? slowdownBlocks(blocks, stats, scale, flip) : 0;
  bench_empty_bpf__destroy(empty);
  if (stats_fd >= 0) close(stats_fd);
  return blocks_status;
}
