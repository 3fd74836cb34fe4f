/* Per-slot per-CPU counter block: each object declares `counts` with its own value struct. */
#ifndef BPFTRAIN_BPF_LIB_COUNTERS_BPF_H
#define BPFTRAIN_BPF_LIB_COUNTERS_BPF_H

#include "bpf/lib/targets.h"

#define BPFTRAIN_COUNTS_MAP(value_type)      \
  struct {                                   \
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); \
    __uint(max_entries, BPFTRAIN_MAX_SLOTS); \
    __type(key, __u32);                      \
    __type(value, value_type);               \
  } counts SEC(".maps")

/* The same block as one copy shared by every CPU, for objects that update it with atomic adds:
 * before Linux 6.10 a per-CPU array lookup is a helper call, an array's lookup is inlined into a
 * bounds check and an address (the loader reads either kind). */
#define BPFTRAIN_SHARED_COUNTS_MAP(value_type) \
  struct {                                     \
    __uint(type, BPF_MAP_TYPE_ARRAY);          \
    __uint(max_entries, BPFTRAIN_MAX_SLOTS);   \
    __type(key, __u32);                        \
    __type(value, value_type);                 \
  } counts SEC(".maps")

/* Events that could not be recorded (full ring buffer, full map), per CPU, one slot. */
#define BPFTRAIN_LOST_MAP()                  \
  struct {                                   \
    __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY); \
    __uint(max_entries, 1);                  \
    __type(key, __u32);                      \
    __type(value, __u64);                    \
  } lost SEC(".maps")

#define BPFTRAIN_COUNT_LOST()                                  \
  do {                                                         \
    __u32 lost_key = 0;                                        \
    __u64* lost_value = bpf_map_lookup_elem(&lost, &lost_key); \
    if (lost_value) (*lost_value)++;                           \
  } while (0)

static __always_inline void* slotCounts(void* map, int slot) {
  __u32 key = (__u32)slot;
  if (slot < 0) return 0;
  return bpf_map_lookup_elem(map, &key);
}

#endif
