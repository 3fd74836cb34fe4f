// Workloads with known answers for the probe tests and the probe benchmark. Each runs in the
// calling process and returns how many events of its kind it caused (or a measured figure).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

namespace bpftrain::tests::bpf {

// Pins the caller to `cpu` (returns false if that fails).
bool pinSelf(int cpu);
// Moves the calling thread between CPUs 0 and 1 `moves` times with sched_setaffinity, checking
// each move landed; starts from wherever the thread is pinned. Returns the moves made.
int64_t migrateSelf(int64_t moves);
// Maps `pages` fresh anonymous pages (no THP), writes one byte per page, unmaps. Returns pages.
int64_t touchFreshPages(int64_t pages);
// Maps `huge_pages` PMD-sized regions with MADV_HUGEPAGE and touches them; returns how many huge
// pages the kernel actually gave (AnonHugePages of the region in /proc/self/smaps).
int64_t touchHugePages(int64_t huge_pages);
// With a second thread spinning on the other CPU (so the mm is live there), `rounds` times:
// mmap+touch+mprotect+munmap a page. Returns rounds.
int64_t tlbShootdowns(int64_t rounds);
// Connects to 127.0.0.1:port and writes `bytes` in 64 KiB writes, one write per `pace` if
// nonzero (an application-limited sender). Returns bytes written.
int64_t tcpSend(uint16_t port, int64_t bytes, std::chrono::microseconds pace = {});
// A training-like step loop: a ~1 MiB buffer reduced and rewritten `steps` times. Returns steps.
int64_t trainingLike(int64_t steps);

// Reads one random word from each of `accesses` pages spread over a 256 MiB buffer (no THP), so
// nearly every read misses the data TLB. Returns accesses.
int64_t dtlbMisses(int64_t accesses);
// The truth of this host about the PMU probes: "" when the event the dtlb_misses probe samples
// (PERF_TYPE_HW_CACHE dTLB read miss, CPU 0, every task) opens, else why not (errno's text).
std::string dtlbEventUnavailable();

// A forked child that runs `setup` at once, then waits for go() to run `body`, reports the
// body's return value, and waits to be reaped. The destructor kills and reaps it in any case.
class Child {
 public:
  Child(std::function<void()> setup, std::function<int64_t()> body);
  ~Child();
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }
  bool ready(std::chrono::milliseconds deadline);  // setup done
  void go();
  // The body's result; false when the deadline passes first.
  bool result(int64_t& out, std::chrono::milliseconds deadline);

 private:
  pid_t pid_ = -1;
  int to_child_ = -1, from_child_ = -1;
};

}  // namespace bpftrain::tests::bpf
