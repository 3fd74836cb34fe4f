// PMU events (PERF_TYPE_HW_CACHE dTLB/iTLB load misses, node loads/misses): the loader opens one
// sampling perf event per CPU; on each overflow the running task's slot gets one sample period.
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/pmu.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

BPFTRAIN_COUNTS_MAP(struct pmu_counts);

static __always_inline int countPeriod(struct bpf_perf_event_data* ctx, int event) {
  struct pmu_counts* c = slotCounts(&counts, currentSlot());
  if (c && event >= 0 && event < PMU_EVENTS) c->events[event] += ctx->sample_period;
  return 0;
}

SEC("perf_event")
int on_dtlb_miss(struct bpf_perf_event_data* ctx) { return countPeriod(ctx, PMU_DTLB_MISSES); }

SEC("perf_event")
int on_itlb_miss(struct bpf_perf_event_data* ctx) { return countPeriod(ctx, PMU_ITLB_MISSES); }

SEC("perf_event")
int on_node_load_miss(struct bpf_perf_event_data* ctx) {
  return countPeriod(ctx, PMU_NODE_LOAD_MISSES);
}

SEC("perf_event")
int on_node_load(struct bpf_perf_event_data* ctx) { return countPeriod(ctx, PMU_NODE_LOADS); }
