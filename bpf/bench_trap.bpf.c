// Empty uprobe and kprobe programs: what one hit of a uprobe or a kprobe costs beyond its program
// (the trap or ftrace entry, the perf-event dispatch, bpf_stats' own timing), which bpf_stats does
// not see. bpftrain-trap-bench (tools/bench rdma) times a tight loop with them attached and not;
// rdma_verbs is uprobes and rdma_rxe kprobes, so their CPU cost is this plus their run time.
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/bench_trap.h"

#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

char LICENSE[] SEC("license") = "GPL";

SEC("uprobe")
int empty_uprobe(void* ctx) { return 0; }

SEC("kprobe")
int empty_kprobe(void* ctx) { return 0; }
