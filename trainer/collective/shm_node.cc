#include "trainer/collective/shm_node.h"

#include <fcntl.h>
#include <gloo/context.h>
#include <gloo/transport/unbound_buffer.h>
#include <linux/futex.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <random>
#include <stdexcept>
#include <thread>

namespace bpftrain::trainer::collective {

struct NodeShm::Header {
  alignas(64) std::atomic<uint32_t> count;
  alignas(64) std::atomic<uint32_t> generation;
  alignas(64) std::atomic<uint32_t> aborted;
};
static_assert(std::atomic<uint32_t>::is_always_lock_free);

namespace {

constexpr size_t kHeaderBytes = 4096;
constexpr uint64_t kShmSetupSlot = 0xB7000006ull << 24;

long futex(std::atomic<uint32_t>* addr, int op, uint32_t val, const timespec* ts) {
  // Not FUTEX_PRIVATE: the word lives in memory shared between processes.
  return syscall(SYS_futex, reinterpret_cast<uint32_t*>(addr), op, val, ts, nullptr, 0);
}

size_t regionBytes(int size, size_t chunk) {
  return kHeaderBytes + size_t(size + 1) * 2 * chunk * sizeof(float);
}

}  // namespace

NodeShm::NodeShm(void* base, size_t bytes, int local_rank, int size, size_t chunk)
    : base_(base),
      bytes_(bytes),
      local_rank_(local_rank),
      size_(size),
      chunk_(chunk),
      header_(static_cast<Header*>(base)),
      data_(reinterpret_cast<float*>(static_cast<char*>(base) + kHeaderBytes)) {}

NodeShm::~NodeShm() { munmap(base_, bytes_); }

float* NodeShm::slot(int local_rank, int parity) {
  return data_ + (size_t(local_rank) * 2 + size_t(parity)) * chunk_;
}

float* NodeShm::result(int parity) { return data_ + (size_t(size_) * 2 + size_t(parity)) * chunk_; }

void NodeShm::abort() {
  header_->aborted.store(1);
  header_->generation.fetch_add(1);
  futex(&header_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
}

void NodeShm::barrier(std::chrono::milliseconds timeout) {
  auto failed = [&] {
    return std::runtime_error("a rank on this node failed (shared-memory stage aborted)");
  };
  if (header_->aborted.load()) throw failed();
  const uint32_t gen = header_->generation.load(std::memory_order_acquire);
  if (header_->count.fetch_add(1, std::memory_order_acq_rel) + 1 == uint32_t(size_)) {
    header_->count.store(0, std::memory_order_relaxed);
    header_->generation.fetch_add(1, std::memory_order_release);
    futex(&header_->generation, FUTEX_WAKE, INT32_MAX, nullptr);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (int spin = 0; header_->generation.load(std::memory_order_acquire) == gen; ++spin) {
    if (spin < 64) {
      std::this_thread::yield();  // short: with more ranks than cores spinning steals the CPU
      continue;
    }
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::nanoseconds(0))
      throw std::runtime_error(
          "a rank on this node did not reach the shared-memory barrier within " +
          std::to_string(timeout.count()) + " ms");
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
        std::min<std::chrono::nanoseconds>(left, std::chrono::milliseconds(100)));
    timespec ts{time_t(ns.count() / 1000000000), long(ns.count() % 1000000000)};
    futex(&header_->generation, FUTEX_WAIT, gen, &ts);
  }
  if (header_->aborted.load()) throw failed();
}

std::unique_ptr<NodeShm> NodeShm::create(gloo::Context& node, size_t chunk, std::string* why) {
  const int size = node.size, rank = node.rank;
  const size_t bytes = regionBytes(size, chunk);
  const auto timeout = node.getTimeout();
  char name[64] = {};
  int32_t status = 0;  // 1 = attached
  void* base = MAP_FAILED;
  std::string error;

  if (rank == 0) {
    std::random_device rd;
    std::snprintf(name, sizeof name, "/bpftrain-%d-%08x", int(getpid()), unsigned(rd()));
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    // posix_fallocate reserves the pages now: a full /dev/shm (64 MiB in many containers) must
    // mean "fall back to TCP", not SIGBUS on the first write.
    int rc = fd >= 0 ? posix_fallocate(fd, 0, off_t(bytes)) : errno;
    if (rc == 0) base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (rc != 0) errno = rc;
    if (base == MAP_FAILED) error = std::string("shm_open/mmap: ") + std::strerror(errno);
    if (fd >= 0) close(fd);
    if (base == MAP_FAILED)
      name[0] = '\0';  // tells members there is nothing to attach
    else
      new (base) Header{};
    auto buf = node.createUnboundBuffer(name, sizeof name);
    for (int m = 1; m < size; ++m) buf->send(m, kShmSetupSlot);
    for (int m = 1; m < size; ++m) buf->waitSend(timeout);
    // Collect every member's result, then announce the decision.
    std::vector<int32_t> statuses(size_t(size), 0);
    auto sbuf = node.createUnboundBuffer(statuses.data(), statuses.size() * sizeof(int32_t));
    for (int m = 1; m < size; ++m)
      sbuf->recv(m, kShmSetupSlot, size_t(m) * sizeof(int32_t), sizeof(int32_t));
    for (int m = 1; m < size; ++m) sbuf->waitRecv(timeout);
    status = base != MAP_FAILED ? 1 : 0;
    for (int m = 1; m < size; ++m) status &= statuses[size_t(m)];
    auto dbuf = node.createUnboundBuffer(&status, sizeof status);
    for (int m = 1; m < size; ++m) dbuf->send(m, kShmSetupSlot);
    for (int m = 1; m < size; ++m) dbuf->waitSend(timeout);
    if (name[0]) shm_unlink(name);  // everyone who will attach has: no leak if we crash later
    if (!status && error.empty())
      error = "a rank of this node could not attach " + std::string(name);
  } else {
    auto buf = node.createUnboundBuffer(name, sizeof name);
    buf->recv(0, kShmSetupSlot);
    buf->waitRecv(timeout);
    name[sizeof name - 1] = '\0';
    if (name[0]) {
      int fd = shm_open(name, O_RDWR, 0600);
      if (fd >= 0) {
        base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
      }
    }
    int32_t mine = base != MAP_FAILED ? 1 : 0;
    auto sbuf = node.createUnboundBuffer(&mine, sizeof mine);
    sbuf->send(0, kShmSetupSlot);
    sbuf->waitSend(timeout);
    auto dbuf = node.createUnboundBuffer(&status, sizeof status);
    dbuf->recv(0, kShmSetupSlot);
    dbuf->waitRecv(timeout);
    if (!status)
      error = name[0] ? "a rank of this node could not attach " + std::string(name)
                      : "the node leader could not create shared memory";
  }
  if (!status) {
    if (base != MAP_FAILED) munmap(base, bytes);
    if (why) *why = error;
    return nullptr;
  }
  return std::unique_ptr<NodeShm>(new NodeShm(base, bytes, rank, size, chunk));
}

}  // namespace bpftrain::trainer::collective
