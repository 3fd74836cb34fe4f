// Empty uprobe, kprobe and fentry programs: what one hit of a uprobe or a kprobe costs beyond its
// program (the trap or ftrace entry, the perf-event dispatch, bpf_stats' own timing), which
// bpf_stats does not see. bpftrain-trap-bench (tools/bench rdma) times a tight loop with them
// attached and not; rdma_verbs is uprobes and rdma_rxe kprobes, so their CPU cost is this plus
// their run time.
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

// An empty fentry program: its attach target is set before load (bpftrain-trap-bench opens one
// object per target), the BPF trampoline being what rdma_rxe's fentry programs pay per hit.
SEC("fentry/__x64_sys_getppid")
int empty_fentry(void* ctx) { return 0; }

// The parts a probe is made of, each alone on the kprobe (bpftrain-trap-bench --parts): what one
// costs under this kernel and machine, in bpf_stats and in the hitting thread's CPU.
struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 16);
} part_ring SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, __u64);
  __type(value, __u64);
} part_lru_map SEC(".maps");

SEC("kprobe")
int part_ktime(void* ctx) {
  __u64 t = bpf_ktime_get_ns();
  return t == 1;
}

SEC("kprobe")
int part_ringbuf(void* ctx) {
  __u64* r = bpf_ringbuf_reserve(&part_ring, 24, 0);
  if (!r) return 0;
  r[0] = 1;
  bpf_ringbuf_submit(r, 0);
  return 0;
}

SEC("kprobe")
int part_ringbuf_nowake(void* ctx) {
  __u64* r = bpf_ringbuf_reserve(&part_ring, 24, 0);
  if (!r) return 0;
  r[0] = 1;
  bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
  return 0;
}

SEC("kprobe")
int part_reads(void* ctx) {
  struct task_struct* task = (void*)bpf_get_current_task();
  __u32 sum = 0, v = 0;
  for (int i = 0; i < 10; i++) {
    bpf_probe_read_kernel(&v, sizeof(v), &task->tgid);
    sum += v;
  }
  return sum == 1;
}

SEC("kprobe")
int part_lru(void* ctx) {
  __u64 key = bpf_get_current_pid_tgid();
  __u64* v = bpf_map_lookup_elem(&part_lru_map, &key);
  if (v) {
    __sync_fetch_and_add(v, 1);
    return 0;
  }
  __u64 one = 1;
  bpf_map_update_elem(&part_lru_map, &key, &one, BPF_ANY);
  return 0;
}
