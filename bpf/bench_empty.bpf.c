// Empty programs on the probes' tracepoints, the same attach type (tp_btf) as the probes: the
// floor a probe's per-event cost is measured against (bpf/bench_empty.h).
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/bench_empty.h"

#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

#define BPFTRAIN_EMPTY(tracepoint) \
  SEC("tp_btf/" #tracepoint)       \
  int empty_##tracepoint(void* ctx) { return 0; }

BPFTRAIN_EMPTY(page_fault_user)
BPFTRAIN_EMPTY(mm_page_alloc)
BPFTRAIN_EMPTY(sched_migrate_task)
BPFTRAIN_EMPTY(tlb_flush)
BPFTRAIN_EMPTY(tcp_sendmsg_locked)
BPFTRAIN_EMPTY(tcp_probe)
BPFTRAIN_EMPTY(tcp_retransmit_skb)
