// bpftrain-trap-bench [--blocks N] [--calls N] [--kprobe-calls N] [--parts]: what one hit of a
// uprobe, a kprobe and an fentry program costs the thread that hits it, beyond the program's own
// run time (bpf_stats cannot see the trap or the trampoline). A tight loop calls a function of this
// binary (uprobe; CALLS times per segment) or getppid(2) (kprobe and fentry on __x64_sys_getppid;
// KPROBE_CALLS times, more since such a hit is cheaper and the syscall noisier); each block runs
// three segments in a random order: A1 and A2 with nothing attached and B with an empty program
// (bpf/bench_trap.bpf.c) attached. Per block, (B - A1) / CALLS is the hit's cost and (A2 - A1) /
// CALLS the same design with no probe (A/A), both in thread CPU time, so a preempted or slow
// stretch of the machine shifts a block, not the pairing. Prints the median of each over the blocks
// with a bootstrap 95% interval of that median, and the empty program's bpf_stats run time per hit.
// tools/bench rdma runs it inside the numalab guest (6.1, with kprobes and fentry); needs CAP_BPF
// and CAP_PERFMON. --hold FUNCS SECONDS puts empty programs on real functions instead, while a
// workload runs (hold() below).
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "bench_trap.skel.h"
#include "tests/support/bootstrap.h"

// The uprobe's target: a call the compiler cannot fold away, in this binary's text.
extern "C" __attribute__((noinline)) uint64_t bpftrain_trap_target(uint64_t x) {
  asm volatile("" : "+r"(x));
  return x + 1;
}

namespace {

constexpr char kKprobeTarget[] = "__x64_sys_getppid";

uint64_t threadCpuNs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

// Thread CPU nanoseconds for `calls` hits of the uprobe target or of getppid.
uint64_t segmentNs(bool kprobe, uint64_t calls) {
  const uint64_t start = threadCpuNs();
  uint64_t sink = 0;
  if (kprobe)
    for (uint64_t i = 0; i < calls; ++i) sink += uint64_t(syscall(SYS_getppid));
  else
    for (uint64_t i = 0; i < calls; ++i) sink = bpftrain_trap_target(sink);
  asm volatile("" : : "r"(sink));
  return threadCpuNs() - start;
}

// This binary's path and the file offset of bpftrain_trap_target, from /proc/self/maps (no symbol
// table needed: numalab strips what it copies into the guest).
bool targetOffset(std::string& path, uint64_t& offset) {
  const auto address = reinterpret_cast<uint64_t>(&bpftrain_trap_target);
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    uint64_t lo = 0, hi = 0, file_offset = 0;
    char perms[8] = {};
    int name_at = 0;
    if (std::sscanf(line.c_str(), "%" SCNx64 "-%" SCNx64 " %7s %" SCNx64 " %*s %*s %n", &lo, &hi,
                    perms, &file_offset, &name_at) < 4)
      continue;
    if (address < lo || address >= hi || perms[2] != 'x' || name_at == 0) continue;
    path = line.substr(size_t(name_at));
    offset = address - lo + file_offset;
    return true;
  }
  return false;
}

using bpftrain::testing::bootstrapMedian;
using bpftrain::testing::Interval;

struct ProgStats {
  uint64_t runs = 0, run_ns = 0;
};

ProgStats statsOf(bpf_program* prog) {
  bpf_prog_info info{};
  uint32_t len = sizeof info;
  ProgStats s;
  if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0) {
    s.runs = info.run_cnt;
    s.run_ns = info.run_time_ns;
  }
  return s;
}

enum class Kind { kUprobe, kKprobe, kFentry };
using Progs = decltype(bench_trap_bpf::progs);  // the skeleton's (anonymous) program table

const char* kindName(Kind kind) {
  return kind == Kind::kUprobe ? "uprobe" : kind == Kind::kKprobe ? "kprobe" : "fentry";
}

// A bench_trap object that loads only the programs `keep` names, fentry ones attached to
// `fentry_target` (set before load: a trampoline is built for one function). Null when it cannot
// load (no fentry on this kernel, no BTF for the function), errno kept.
bench_trap_bpf* openOnly(std::initializer_list<bpf_program * Progs::*> keep,
                         const char* fentry_target = nullptr) {
  bench_trap_bpf* skel = bench_trap_bpf__open();
  if (!skel) return nullptr;
  bpf_program* all[] = {skel->progs.empty_uprobe, skel->progs.empty_kprobe,
                        skel->progs.empty_fentry, skel->progs.part_ktime,
                        skel->progs.part_ringbuf, skel->progs.part_ringbuf_nowake,
                        skel->progs.part_reads,   skel->progs.part_lru};
  for (bpf_program* prog : all) bpf_program__set_autoload(prog, false);
  for (auto member : keep) bpf_program__set_autoload(skel->progs.*member, true);
  if (fentry_target && bpf_program__set_attach_target(skel->progs.empty_fentry, 0, fentry_target)) {
    const int saved = errno;
    bench_trap_bpf__destroy(skel);
    errno = saved;
    return nullptr;
  }
  if (bench_trap_bpf__load(skel)) {
    const int saved = errno;
    bench_trap_bpf__destroy(skel);
    errno = saved;
    return nullptr;
  }
  return skel;
}

// One kind's blocks; prints its line. False (with a message) when the probe cannot attach.
bool measure(bpf_program* prog, Kind kind, int blocks, uint64_t calls, std::mt19937_64& rng,
             const char* part_name = nullptr) {
  const char* name = part_name ? part_name : kindName(kind);
  const bool syscall_loop = kind != Kind::kUprobe;
  std::string path;
  uint64_t offset = 0;
  if (kind == Kind::kUprobe && !targetOffset(path, offset)) {
    std::fprintf(stderr, "trap bench: bpftrain_trap_target not found in /proc/self/maps\n");
    return false;
  }
  auto attach = [&]() -> bpf_link* {
    switch (kind) {
      case Kind::kKprobe:
        return bpf_program__attach_kprobe(prog, false, kKprobeTarget);
      case Kind::kFentry:
        return bpf_program__attach_trace(prog);
      case Kind::kUprobe:
        break;
    }
    return bpf_program__attach_uprobe(prog, false, 0, path.c_str(), size_t(offset));
  };
  // Warm-up, and the check that it attaches at all.
  bpf_link* probe = attach();
  if (!probe) {
    std::fprintf(stderr,
                 "trap bench: cannot attach the empty %s (%s): %s; run as root on a kernel with "
                 "%s (tools/numalab's guest has them)\n",
                 name, kind == Kind::kUprobe ? "bpftrain_trap_target" : kKprobeTarget,
                 std::strerror(errno), kindName(kind));
    return false;
  }
  segmentNs(syscall_loop, calls / 10);
  bpf_link__destroy(probe);
  segmentNs(syscall_loop, calls / 10);
  const ProgStats before = statsOf(prog);
  std::vector<double> ab, aa;
  std::array<int, 3> order = {0, 1, 2};  // 0: A1, 1: A2, 2: B
  for (int b = 0; b < blocks; ++b) {
    std::shuffle(order.begin(), order.end(), rng);
    uint64_t ns[3] = {};
    for (int segment : order) {
      bpf_link* link = segment == 2 ? attach() : nullptr;
      if (segment == 2 && !link) {
        std::fprintf(stderr, "trap bench: re-attaching the %s failed: %s\n", name,
                     std::strerror(errno));
        return false;
      }
      ns[segment] = segmentNs(syscall_loop, calls);
      if (link) bpf_link__destroy(link);
    }
    ab.push_back((double(ns[2]) - double(ns[0])) / double(calls));
    aa.push_back((double(ns[1]) - double(ns[0])) / double(calls));
  }
  const ProgStats after = statsOf(prog);
  const uint64_t hits = after.runs - before.runs;
  const Interval hit = bootstrapMedian(ab, rng), floor = bootstrapMedian(aa, rng);
  // One line per kind, key=value, for tools/bench rdma to read.
  std::printf(
      "trap %s hit_ns=%.0f hit_lo=%.0f hit_hi=%.0f aa_ns=%.0f aa_lo=%.0f aa_hi=%.0f prog_ns=%.0f "
      "hits=%" PRIu64 " expected=%" PRIu64 " blocks=%d calls=%" PRIu64 "\n",
      name, hit.median, hit.lo, hit.hi, floor.median, floor.lo, floor.hi,
      hits ? double(after.run_ns - before.run_ns) / double(hits) : 0.0, hits,
      uint64_t(blocks) * calls, blocks, calls);
  std::fflush(stdout);
  return true;
}

// --hold: the empty kprobe and the empty fentry program (and with --parts the one-helper parts, on
// the kprobe) on each of a probe's real functions, for `seconds` or, with 0, until SIGTERM or
// SIGINT; then one line per function and program: its runs and bpf_stats time per run. A cold
// function's run costs several times a tight loop's under TCG, and tools/bench rdma scales the
// loop's trap by that ratio (docs/numalab.md).
int hold(const std::string& functions, long seconds, bool parts) {
  struct Held {
    std::string function;
    bench_trap_bpf* kprobes = nullptr;
    bench_trap_bpf* fentry = nullptr;
    std::vector<std::pair<bpf_program*, ProgStats>> progs;
    std::vector<bpf_link*> links;
  };
  std::vector<Held> held;
  for (size_t at = 0; at <= functions.size();) {
    size_t comma = functions.find(',', at);
    if (comma == std::string::npos) comma = functions.size();
    Held h;
    h.function = functions.substr(at, comma - at);
    at = comma + 1;
    if (h.function.empty()) continue;
    using P = Progs;
    h.kprobes = parts ? openOnly({&P::empty_kprobe, &P::part_ktime, &P::part_reads, &P::part_lru})
                      : openOnly({&P::empty_kprobe});
    if (!h.kprobes) {
      std::fprintf(stderr, "trap bench: cannot load bench_trap.bpf.o: %s\n", std::strerror(errno));
      return 1;
    }
    std::vector<bpf_program*> kprobe_progs = {h.kprobes->progs.empty_kprobe};
    if (parts)
      for (bpf_program* p :
           {h.kprobes->progs.part_ktime, h.kprobes->progs.part_reads, h.kprobes->progs.part_lru})
        kprobe_progs.push_back(p);
    for (bpf_program* prog : kprobe_progs) {
      bpf_link* link = bpf_program__attach_kprobe(prog, false, h.function.c_str());
      if (!link) {
        std::fprintf(stderr, "trap bench: cannot attach a kprobe to %s: %s\n", h.function.c_str(),
                     std::strerror(errno));
        return 1;
      }
      h.links.push_back(link);
      h.progs.emplace_back(prog, ProgStats{});
    }
    // No fentry (a kernel without trampolines, a function without BTF) is said, not fatal.
    h.fentry = openOnly({&P::empty_fentry}, h.function.c_str());
    bpf_link* link = h.fentry ? bpf_program__attach_trace(h.fentry->progs.empty_fentry) : nullptr;
    if (link) {
      h.links.push_back(link);
      h.progs.emplace_back(h.fentry->progs.empty_fentry, ProgStats{});
    } else {
      std::printf("hold %s empty_fentry unavailable: %s\n", h.function.c_str(),
                  std::strerror(errno));
    }
    held.push_back(std::move(h));
  }
  for (Held& h : held)
    for (auto& [prog, stats] : h.progs) stats = statsOf(prog);
  std::printf("hold ready\n");  // a script waits for this before it starts the workload
  std::fflush(stdout);
  if (seconds > 0) {
    sleep(unsigned(seconds));
  } else {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    int signal = 0;
    sigwait(&set, &signal);
  }
  for (Held& h : held) {
    for (auto& [prog, before] : h.progs) {
      const ProgStats after = statsOf(prog);
      const uint64_t runs = after.runs - before.runs;
      std::printf("hold %s %s runs=%" PRIu64 " ns_per_run=%.0f\n", h.function.c_str(),
                  bpf_program__name(prog), runs,
                  runs ? double(after.run_ns - before.run_ns) / double(runs) : 0.0);
    }
    for (bpf_link* link : h.links) bpf_link__destroy(link);
    bench_trap_bpf__destroy(h.kprobes);
    if (h.fentry) bench_trap_bpf__destroy(h.fentry);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 20;
  uint64_t calls = 20000, kprobe_calls = 100000;
  bool parts = false;
  std::string hold_functions;
  long hold_seconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--parts") {
      parts = true;
      continue;
    }
    if (flag == "--hold" && i + 2 < argc) {
      hold_functions = argv[++i];
      hold_seconds = std::strtol(argv[++i], nullptr, 10);
      continue;
    }
    if ((flag == "--blocks" || flag == "--calls" || flag == "--kprobe-calls") && i + 1 < argc) {
      const long value = std::strtol(argv[++i], nullptr, 10);
      if (value <= 0) {
        std::fprintf(stderr, "trap bench: %s takes a positive integer\n", flag.c_str());
        return 2;
      }
      if (flag == "--blocks")
        blocks = int(value);
      else if (flag == "--calls")
        calls = uint64_t(value);
      else
        kprobe_calls = uint64_t(value);
      continue;
    }
    std::fprintf(stderr,
                 "usage: bpftrain-trap-bench [--blocks N] [--calls N] [--kprobe-calls N] [--parts] "
                 "[--hold FUNC[,FUNC...] SECONDS (0: until SIGTERM)]\n");
    return 2;
  }
  // bpf_stats on, as the collector runs with it: its timing is part of a probe's real hit cost.
  const int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (stats_fd < 0) {
    std::fprintf(stderr, "trap bench: cannot enable bpf_stats (%s): run as root\n",
                 std::strerror(errno));
    return 1;
  }
  if (!hold_functions.empty()) {
    // Block the signals before any thread exists, so that sigwait() gets them.
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    const int rc = hold(hold_functions, hold_seconds, parts);
    close(stats_fd);
    return rc;
  }
  // One CPU: a migration mid-segment would charge the other CPU's cache misses to one side.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
  using P = Progs;
  bench_trap_bpf* skel =
      openOnly({&P::empty_uprobe, &P::empty_kprobe, &P::part_ktime, &P::part_ringbuf,
                &P::part_ringbuf_nowake, &P::part_reads, &P::part_lru});
  if (!skel) {
    std::fprintf(stderr, "trap bench: cannot load bench_trap.bpf.o: %s\n", std::strerror(errno));
    return 1;
  }
  std::mt19937_64 rng(20261203);
  bool ok = measure(skel->progs.empty_uprobe, Kind::kUprobe, blocks, calls, rng) &&
            measure(skel->progs.empty_kprobe, Kind::kKprobe, blocks, kprobe_calls, rng);
  // fentry where the kernel has BPF trampolines (the 6.1 guest; not this host's 6.18): said, not
  // fatal.
  if (ok) {
    // getppid's wrapper where its BTF has it (6.1's Debian build has none: ESRCH), else the
    // function getppid calls (other processes' calls run the program too, on their own CPU).
    bench_trap_bpf* fentry = nullptr;
    for (const char* target : {kKprobeTarget, "__task_pid_nr_ns"})
      if (!fentry && (fentry = openOnly({&P::empty_fentry}, target)))
        std::fprintf(stderr, "trap bench: the empty fentry program is on %s\n", target);
    if (fentry) {
      ok = measure(fentry->progs.empty_fentry, Kind::kFentry, blocks, kprobe_calls, rng);
      bench_trap_bpf__destroy(fentry);
    } else {
      std::printf("trap fentry unavailable: %s\n", std::strerror(errno));
    }
  }
  if (ok && parts) {
    const std::pair<bpf_program*, const char*> kParts[] = {
        {skel->progs.part_ktime, "part_ktime"},
        {skel->progs.part_ringbuf, "part_ringbuf"},
        {skel->progs.part_ringbuf_nowake, "part_ringbuf_nowake"},
        {skel->progs.part_reads, "part_reads"},
        {skel->progs.part_lru, "part_lru"}};
    for (const auto& [prog, name] : kParts)
      ok = ok && measure(prog, Kind::kKprobe, blocks, kprobe_calls, rng, name);
  }
  bench_trap_bpf__destroy(skel);
  close(stats_fd);
  return ok ? 0 : 1;
}
