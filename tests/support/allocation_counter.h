// Counts heap allocations on every thread while g_counting is set, so a test can check that a
// hot path allocates nothing:  g_allocations = 0; g_counting = true; ...; g_counting = false;
// This REPLACES the global operator new/delete, which may be defined only once per program:
// include it from exactly one source file of a test binary.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <new>

// TSan's runtime defines operator new/delete itself (statically linked), so under TSan nothing is
// replaced and nothing counted: tests check kCountsAllocations and skip (tools/test --sanitize
// thread leaves them out).
#if defined(__SANITIZE_THREAD__)
#define BPFTRAIN_ALLOCATIONS_UNCOUNTED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define BPFTRAIN_ALLOCATIONS_UNCOUNTED 1
#endif
#endif

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
#ifdef BPFTRAIN_ALLOCATIONS_UNCOUNTED
constexpr bool kCountsAllocations = false;
#else
constexpr bool kCountsAllocations = true;
#endif
}  // namespace

#ifndef BPFTRAIN_ALLOCATIONS_UNCOUNTED
// The replacement pairs malloc with free, which GCC cannot see through once inlined.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t n) {
  if (g_counting.load(std::memory_order_relaxed)) g_allocations.fetch_add(1);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
#endif
