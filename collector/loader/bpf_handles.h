// Ownership of libbpf handles in types: every handle the loader holds is a unique_ptr with the
// matching libbpf destructor or a UniqueFd, so a failed attach or an early return leaks nothing.
#pragma once

#include <bpf/libbpf.h>
#include <unistd.h>

#include <functional>
#include <memory>
#include <utility>

namespace bpftrain::collector::loader {

struct LinkDeleter {
  void operator()(bpf_link* link) const { bpf_link__destroy(link); }
};
using LinkPtr = std::unique_ptr<bpf_link, LinkDeleter>;

struct RingBufferDeleter {
  void operator()(ring_buffer* rb) const { ring_buffer__free(rb); }
};
using RingBufferPtr = std::unique_ptr<ring_buffer, RingBufferDeleter>;

// A generated skeleton of any stem, destroyed with its own X_bpf__destroy (closes the object).
using SkeletonPtr = std::unique_ptr<void, std::function<void(void*)>>;

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  int get() const { return fd_; }
  // Hands the fd to a new owner (e.g. a libbpf link that closes it on destroy).
  int release() { return std::exchange(fd_, -1); }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

}  // namespace bpftrain::collector::loader
