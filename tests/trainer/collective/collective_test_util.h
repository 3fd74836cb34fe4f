// Shared helpers of the collective tests: one thread per rank in this process (each with its own
// Gloo device and contexts), temp-dir stores, hashes and exactly summable values.
#pragma once

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "tests/support/temp_dir.h"
#include "trainer/collective/communicator.h"

namespace bpftrain::trainer::collective::test_util {

using namespace std::chrono_literals;

inline constexpr Topology kAll[] = {Topology::kRing, Topology::kHalvingDoubling, Topology::kBcube,
                                    Topology::kHierarchical};

// Each test's rendezvous store lives in one of these.
class TempDir : public bpftrain::testing::TempDir {
 public:
  TempDir() : bpftrain::testing::TempDir("bpftrain-collective") {}
};

inline CommOptions options(const std::string& store, int rank, int world) {
  CommOptions o;
  o.rank = rank;
  o.world = world;
  o.store = store;
  o.timeout = 20s;
  // Two ranks per "node", so hierarchical exercises both its node and its leader stage.
  for (int r = 0; r < world; ++r) o.node_of.push_back(r / 2);
  return o;
}

// Runs fn(rank, comm) on `world` threads; rethrows the first failure after joining.
inline void runRanks(int world, const std::function<void(int, Communicator&)>& fn,
                     const std::string& store = "",
                     const std::function<void(CommOptions&)>& tweak = nullptr) {
  TempDir dir;
  const std::string where = store.empty() ? dir.path() : store;
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(world);
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        auto o = options(where, r, world);
        if (tweak) tweak(o);
        auto comm = Communicator::create(o);
        fn(r, *comm);
      } catch (...) {
        errors[r] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

inline uint64_t hashOf(std::span<const float> v) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes: bit-identical or not
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (size_t i = 0; i < v.size_bytes(); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// Small integers: every summation order gives the exact same float, so we can compare to a
// serial sum bit for bit.
inline float intValue(int rank, size_t i, int salt) {
  return float(int((i * 7 + size_t(rank) * 13 + size_t(salt) * 3) % 64) - 32);
}

}  // namespace bpftrain::trainer::collective::test_util
