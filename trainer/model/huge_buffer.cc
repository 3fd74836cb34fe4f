#include "trainer/model/huge_buffer.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

namespace bpftrain::trainer::model {

HugeBuffer::HugeBuffer(size_t count, bool hugepages) : count_(count) {
  if (count == 0) return;
  const size_t bytes = count * sizeof(float);
  region_bytes_ = (bytes + kHugePageSize - 1) / kHugePageSize * kHugePageSize;
  // Over-map by one huge page so the start can be aligned without MAP_HUGETLB reservations.
  mapping_bytes_ = region_bytes_ + kHugePageSize;
  mapping_ =
      mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (mapping_ == MAP_FAILED) {
    mapping_ = nullptr;
    throw std::runtime_error("cannot map " + std::to_string(mapping_bytes_ >> 20) +
                             " MiB for model buffers: " + std::strerror(errno) +
                             " (a smaller --model needs less memory)");
  }
  auto base = reinterpret_cast<uintptr_t>(mapping_);
  uintptr_t aligned = (base + kHugePageSize - 1) & ~(uintptr_t{kHugePageSize} - 1);
  data_ = reinterpret_cast<float*>(aligned);
  if (hugepages) advised_ = madvise(data_, region_bytes_, MADV_HUGEPAGE) == 0;
}

HugeBuffer::~HugeBuffer() { release(); }

void HugeBuffer::release() {
  if (mapping_ != nullptr) munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  data_ = nullptr;
  count_ = 0;
}

HugeBuffer::HugeBuffer(HugeBuffer&& other) noexcept { *this = std::move(other); }

HugeBuffer& HugeBuffer::operator=(HugeBuffer&& other) noexcept {
  if (this != &other) {
    release();
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    data_ = std::exchange(other.data_, nullptr);
    count_ = std::exchange(other.count_, 0);
    region_bytes_ = std::exchange(other.region_bytes_, 0);
    advised_ = std::exchange(other.advised_, false);
  }
  return *this;
}

namespace {
// One field of /proc/self/smaps_rollup ("Rss:", "AnonHugePages:"), in bytes; -1 if unreadable.
int64_t smapsRollupBytes(const char* key) {
  int fd = open("/proc/self/smaps_rollup", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof(buf) - 1);
  close(fd);
  if (n <= 0) return -1;
  buf[n] = '\0';
  const char* p = std::strstr(buf, key);
  if (p == nullptr) return -1;
  p += std::strlen(key);
  int64_t kb = 0;
  while (*p == ' ' || *p == '\t') ++p;
  while (*p >= '0' && *p <= '9') kb = kb * 10 + (*p++ - '0');
  return kb * 1024;
}
}  // namespace

int64_t anonHugePagesBytes() { return smapsRollupBytes("\nAnonHugePages:"); }

int64_t residentBytes() { return smapsRollupBytes("\nRss:"); }

uint64_t hashFloats(std::span<const float> values) {
  uint64_t h = 1469598103934665603ull;
  auto bytes = reinterpret_cast<const uint8_t*>(values.data());
  for (size_t i = 0; i < values.size_bytes(); ++i) {
    h ^= bytes[i];
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace bpftrain::trainer::model
