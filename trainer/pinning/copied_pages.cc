#include "trainer/pinning/copied_pages.h"

#include <fcntl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>

namespace bpftrain::trainer::pinning {
namespace {

// /proc/PID/pagemap, one 64-bit entry per page (Documentation/admin-guide/mm/pagemap.rst).
constexpr uint64_t kPresent = 1ull << 63;
constexpr uint64_t kFileOrSharedAnon = 1ull << 61;
constexpr size_t kBatchPages = 512;  // pagemap entries read and pages moved per call

struct Batch {
  std::array<void*, kBatchPages> pages{};
  std::array<int, kBatchPages> nodes{}, status{};
  size_t size = 0;
};

// Returns 0 or errno; pages that could not move (mapped by another process too, a node full)
// carry a negative status and are not counted.
int flush(Batch& batch, long& moved) {
  if (batch.size == 0) return 0;
  int error = 0;
  if (syscall(SYS_move_pages, 0, batch.size, batch.pages.data(), batch.nodes.data(),
              batch.status.data(), 0) != 0)
    error = errno;
  for (size_t i = 0; i < batch.size; ++i)
    if (batch.status[i] == batch.nodes[i]) ++moved;
  batch.size = 0;
  return error;
}

}  // namespace

int moveCopiedFilePages(std::span<const AddressRange> ranges, int node, long& moved) {
  moved = 0;
  const long page = sysconf(_SC_PAGESIZE);
  const int fd = open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno;
  int error = 0;
  Batch batch;
  std::array<uint64_t, kBatchPages> entries{};
  for (const AddressRange& range : ranges) {
    for (uintptr_t at = range.start; at < range.end;) {
      const size_t count = std::min<size_t>(kBatchPages, (range.end - at) / uintptr_t(page));
      const off_t offset = off_t(at / uintptr_t(page) * sizeof(uint64_t));
      const ssize_t got = pread(fd, entries.data(), count * sizeof(uint64_t), offset);
      if (got <= 0) break;  // unmapped meanwhile
      const size_t read = size_t(got) / sizeof(uint64_t);
      for (size_t i = 0; i < read; ++i) {
        if ((entries[i] & kPresent) == 0 || (entries[i] & kFileOrSharedAnon) != 0) continue;
        batch.pages[batch.size] = reinterpret_cast<void*>(at + i * uintptr_t(page));
        batch.nodes[batch.size] = node;
        if (++batch.size == kBatchPages) {
          const int e = flush(batch, moved);
          if (error == 0) error = e;
        }
      }
      at += read * uintptr_t(page);
    }
  }
  const int last = flush(batch, moved);
  close(fd);
  return error != 0 ? error : last;
}

}  // namespace bpftrain::trainer::pinning
