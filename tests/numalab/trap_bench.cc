// bpftrain-trap-bench [--blocks N] [--calls N] [--kprobe-calls N]: what one hit of a uprobe and of
// a kprobe costs the thread that hits it, beyond the program's own run time (bpf_stats cannot see
// the trap). A tight loop calls a function of this binary (uprobe; CALLS times per segment) or
// getppid(2) (kprobe on
// __x64_sys_getppid; KPROBE_CALLS times, more since a kprobe hit is cheaper and the syscall
// noisier); each block runs three segments in a random order: A1 and A2 with nothing attached and B
// with an empty program (bpf/bench_trap.bpf.c) attached. Per block, (B - A1) / CALLS is the hit's
// cost and (A2 - A1) / CALLS the same design with no probe (A/A), both in thread CPU time, so a
// preempted or slow stretch of the machine shifts a block, not the pairing. Prints the median of
// each over the blocks with a bootstrap 95% interval of that median, and the empty program's
// bpf_stats run time per hit. tools/bench rdma runs it inside the numalab guest (6.1, with
// kprobes); needs CAP_BPF and CAP_PERFMON.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <sched.h>
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

// One kind's blocks; prints its line. False (with a message) when the probe cannot attach.
bool measure(bench_trap_bpf* skel, bool kprobe, int blocks, uint64_t calls, std::mt19937_64& rng,
             bpf_program* part = nullptr, const char* part_name = nullptr) {
  const char* kind = part_name ? part_name : kprobe ? "kprobe" : "uprobe";
  bpf_program* prog = part ? part : kprobe ? skel->progs.empty_kprobe : skel->progs.empty_uprobe;
  std::string path;
  uint64_t offset = 0;
  if (!kprobe && !targetOffset(path, offset)) {
    std::fprintf(stderr, "trap bench: bpftrain_trap_target not found in /proc/self/maps\n");
    return false;
  }
  auto attach = [&]() -> bpf_link* {
    return kprobe ? bpf_program__attach_kprobe(prog, false, kKprobeTarget)
                  : bpf_program__attach_uprobe(prog, false, 0, path.c_str(), size_t(offset));
  };
  // Warm-up, and the check that it attaches at all.
  bpf_link* probe = attach();
  if (!probe) {
    std::fprintf(stderr,
                 "trap bench: cannot attach the empty %s (%s): %s; run as root on a kernel with "
                 "%s (tools/numalab's guest has both)\n",
                 kind, kprobe ? kKprobeTarget : "bpftrain_trap_target", std::strerror(errno),
                 kprobe ? "kprobes" : "uprobes");
    return false;
  }
  segmentNs(kprobe, calls / 10);
  bpf_link__destroy(probe);
  segmentNs(kprobe, calls / 10);
  const ProgStats before = statsOf(prog);
  std::vector<double> ab, aa;
  std::array<int, 3> order = {0, 1, 2};  // 0: A1, 1: A2, 2: B
  for (int b = 0; b < blocks; ++b) {
    std::shuffle(order.begin(), order.end(), rng);
    uint64_t ns[3] = {};
    for (int segment : order) {
      bpf_link* link = segment == 2 ? attach() : nullptr;
      if (segment == 2 && !link) {
        std::fprintf(stderr, "trap bench: re-attaching the %s failed: %s\n", kind,
                     std::strerror(errno));
        return false;
      }
      ns[segment] = segmentNs(kprobe, calls);
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
      kind, hit.median, hit.lo, hit.hi, floor.median, floor.lo, floor.hi,
      hits ? double(after.run_ns - before.run_ns) / double(hits) : 0.0, hits,
      uint64_t(blocks) * calls, blocks, calls);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  int blocks = 20;
  uint64_t calls = 20000, kprobe_calls = 100000;
  bool parts = false;
  std::string hold_function;
  long hold_seconds = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--parts") {
      parts = true;
      continue;
    }
    if (flag == "--hold" && i + 2 < argc) {
      hold_function = argv[++i];
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
    std::fprintf(
        stderr,
        "usage: bpftrain-trap-bench [--blocks N] [--calls N] [--kprobe-calls N] [--parts]\n");
    return 2;
  }
  // One CPU: a migration mid-segment would charge the other CPU's cache misses to one side.
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  CPU_SET(0, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus);
  // bpf_stats on, as the collector runs with it: its timing is part of a probe's real hit cost.
  const int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);
  if (stats_fd < 0) {
    std::fprintf(stderr, "trap bench: cannot enable bpf_stats (%s): run as root\n",
                 std::strerror(errno));
    return 1;
  }
  bench_trap_bpf* skel = bench_trap_bpf__open_and_load();
  if (!skel) {
    std::fprintf(stderr, "trap bench: cannot load bench_trap.bpf.o: %s\n", std::strerror(errno));
    return 1;
  }
  if (!hold_function.empty()) {
    // A control: the empty program and each part on a real probe's function, for as long as a
    // workload runs, so that their bpf_stats per run can be set next to that probe's.
    bpf_program* progs[] = {skel->progs.empty_kprobe, skel->progs.part_ktime,
                            skel->progs.part_reads, skel->progs.part_lru};
    std::vector<bpf_link*> links;
    for (bpf_program* prog : progs) {
      bpf_link* link = bpf_program__attach_kprobe(prog, false, hold_function.c_str());
      if (!link) {
        std::fprintf(stderr, "trap bench: cannot attach to %s: %s\n", hold_function.c_str(),
                     std::strerror(errno));
        return 1;
      }
      links.push_back(link);
    }
    ProgStats before[4];
    for (int i = 0; i < 4; ++i) before[i] = statsOf(progs[i]);
    sleep(unsigned(hold_seconds));
    for (int i = 0; i < 4; ++i) {
      const ProgStats after = statsOf(progs[i]);
      const uint64_t runs = after.runs - before[i].runs;
      std::printf("hold %s %s runs=%" PRIu64 " ns_per_run=%.0f\n", hold_function.c_str(),
                  bpf_program__name(progs[i]), runs,
                  runs ? double(after.run_ns - before[i].run_ns) / double(runs) : 0.0);
    }
    for (bpf_link* link : links) bpf_link__destroy(link);
    bench_trap_bpf__destroy(skel);
    return 0;
  }
  std::mt19937_64 rng(20261203);
  bool ok =
      measure(skel, false, blocks, calls, rng) && measure(skel, true, blocks, kprobe_calls, rng);
  if (ok && parts) {
    const std::pair<bpf_program*, const char*> kParts[] = {
        {skel->progs.part_ktime, "part_ktime"},
        {skel->progs.part_ringbuf, "part_ringbuf"},
        {skel->progs.part_ringbuf_nowake, "part_ringbuf_nowake"},
        {skel->progs.part_reads, "part_reads"},
        {skel->progs.part_lru, "part_lru"}};
    for (const auto& [prog, name] : kParts)
      ok = ok && measure(skel, true, blocks, kprobe_calls, rng, prog, name);
  }
  bench_trap_bpf__destroy(skel);
  close(stats_fd);
  return ok ? 0 : 1;
}
