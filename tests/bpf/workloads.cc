#include "tests/bpf/workloads.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace bpftrain::tests::bpf {

bool pinSelf(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return sched_setaffinity(0, sizeof(set), &set) == 0;
}

int64_t migrateSelf(int64_t moves) {
  int64_t made = 0;
  for (int64_t i = 0; i < moves; ++i) {
    const int target = sched_getcpu() == 0 ? 1 : 0;
    if (!pinSelf(target)) break;
    // sched_setaffinity returns after the stopper moved us; check rather than trust.
    if (sched_getcpu() != target) break;
    ++made;
  }
  return made;
}

int64_t touchFreshPages(int64_t pages) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t len = page * static_cast<size_t>(pages);
  auto* p = static_cast<volatile char*>(
      mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (p == MAP_FAILED) return 0;
  madvise(const_cast<char*>(p), len, MADV_NOHUGEPAGE);
  for (int64_t i = 0; i < pages; ++i) p[i * page] = 1;
  munmap(const_cast<char*>(p), len);
  return pages;
}

int64_t touchHugePages(int64_t huge_pages) {
  const size_t huge = 2u << 20;
  const size_t len = huge * static_cast<size_t>(huge_pages);
  char* raw = static_cast<char*>(
      mmap(nullptr, len + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
  if (raw == MAP_FAILED) return 0;
  char* p = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(raw) + huge - 1) & ~(huge - 1));
  madvise(p, len, MADV_HUGEPAGE);
  for (int64_t i = 0; i < huge_pages; ++i) static_cast<volatile char*>(p)[i * huge] = 1;
  // AnonHugePages of the mapping that contains p.
  int64_t got_kb = 0;
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool in_region = false;
  while (std::getline(smaps, line)) {
    uintptr_t lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > line.find(' ')) {
      in_region = lo <= reinterpret_cast<uintptr_t>(p) && reinterpret_cast<uintptr_t>(p) < hi;
      continue;
    }
    long kb = 0;
    if (in_region && std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) got_kb += kb;
  }
  munmap(raw, len + huge);
  return got_kb / 2048;
}

int64_t tlbShootdowns(int64_t rounds) {
  std::atomic<bool> stop{false};
  std::atomic<bool> running{false};
  std::thread spinner([&] {
    pinSelf(1);
    running = true;
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  pinSelf(0);
  while (!running) sched_yield();
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  int64_t done = 0;
  for (int64_t i = 0; i < rounds; ++i) {
    auto* p = static_cast<volatile char*>(
        mmap(nullptr, page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0));
    if (p == MAP_FAILED) break;
    p[0] = 1;
    mprotect(const_cast<char*>(p), page, PROT_READ);
    munmap(const_cast<char*>(p), page);
    ++done;
  }
  stop = true;
  spinner.join();
  return done;
}

int64_t tcpSend(uint16_t port, int64_t bytes, std::chrono::microseconds pace) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return 0;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return 0;
  }
  std::vector<char> chunk(64 << 10, 'x');
  int64_t sent = 0;
  while (sent < bytes) {
    const size_t want = static_cast<size_t>(std::min<int64_t>(bytes - sent, chunk.size()));
    const ssize_t n = send(fd, chunk.data(), want, MSG_NOSIGNAL);
    if (n <= 0) break;
    sent += n;
    if (pace.count() > 0) std::this_thread::sleep_for(pace);
  }
  shutdown(fd, SHUT_WR);
  char sink;
  while (read(fd, &sink, 1) > 0) {
  }
  close(fd);
  return sent;
}

int64_t trainingLike(int64_t steps) {
  std::vector<float> weights(256 << 10, 1.0f), grads(256 << 10, 0.5f);
  for (int64_t s = 0; s < steps; ++s) {
    float norm = 0;
    for (size_t i = 0; i < grads.size(); ++i) norm += grads[i] * grads[i];
    const float scale = 0.001f / (1.0f + norm * 1e-9f);
    for (size_t i = 0; i < weights.size(); ++i) weights[i] -= scale * grads[i];
  }
  return weights[0] > 0 ? steps : steps;
}

int64_t dtlbMisses(int64_t accesses) {
  constexpr size_t kBytes = 256u << 20, kPage = 4096;
  void* map = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) return 0;
  madvise(map, kBytes, MADV_NOHUGEPAGE);  // 4 KiB pages: far more than any TLB holds
  auto* bytes = static_cast<volatile uint8_t*>(map);
  for (size_t off = 0; off < kBytes; off += kPage) bytes[off] = 1;
  std::minstd_rand next(42);
  uint64_t sum = 0;
  for (int64_t i = 0; i < accesses; ++i) sum += bytes[(next() % (kBytes / kPage)) * kPage];
  munmap(map, kBytes);
  return sum > 0 ? accesses : 0;
}

std::string dtlbEventUnavailable() {
  perf_event_attr attr{};
  attr.type = PERF_TYPE_HW_CACHE;
  attr.size = sizeof(attr);
  attr.config = PERF_COUNT_HW_CACHE_DTLB | (PERF_COUNT_HW_CACHE_OP_READ << 8) |
                (PERF_COUNT_HW_CACHE_RESULT_MISS << 16);
  attr.sample_period = 10'000;
  attr.disabled = 1;
  const int fd =
      static_cast<int>(syscall(SYS_perf_event_open, &attr, -1, 0, -1, PERF_FLAG_FD_CLOEXEC));
  if (fd < 0) return std::strerror(errno);
  close(fd);
  return {};
}

Child::Child(std::function<void()> setup, std::function<int64_t()> body) {
  int down[2], up[2];
  if (pipe2(down, O_CLOEXEC) != 0 || pipe2(up, O_CLOEXEC) != 0) return;
  pid_ = fork();
  if (pid_ == 0) {
    close(down[1]);
    close(up[0]);
    setup();
    char byte = 'r';
    if (write(up[1], &byte, 1) != 1) _exit(1);
    if (read(down[0], &byte, 1) != 1) _exit(1);
    const int64_t result = body();
    if (write(up[1], &result, sizeof(result)) != sizeof(result)) _exit(1);
    if (read(down[0], &byte, 1) < 0) _exit(1);  // parent closes the pipe: exit
    _exit(0);
  }
  close(down[0]);
  close(up[1]);
  to_child_ = down[1];
  from_child_ = up[0];
}

Child::~Child() {
  if (to_child_ >= 0) close(to_child_);
  if (from_child_ >= 0) close(from_child_);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

static bool readWithin(int fd, void* buf, size_t len, std::chrono::milliseconds deadline) {
  const auto end = std::chrono::steady_clock::now() + deadline;
  size_t got = 0;
  while (got < len) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, static_cast<int>(left.count())) <= 0) continue;
    const ssize_t n = read(fd, static_cast<char*>(buf) + got, len - got);
    if (n <= 0) return false;
    got += static_cast<size_t>(n);
  }
  return true;
}

bool Child::ready(std::chrono::milliseconds deadline) {
  char byte;
  return readWithin(from_child_, &byte, 1, deadline);
}

void Child::go() {
  char byte = 'g';
  if (write(to_child_, &byte, 1) != 1) return;
}

bool Child::result(int64_t& out, std::chrono::milliseconds deadline) {
  return readWithin(from_child_, &out, sizeof(out), deadline);
}

}  // namespace bpftrain::tests::bpf
