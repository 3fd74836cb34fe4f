/* bench_trap: an empty uprobe and an empty kprobe program, so that tools/bench rdma can price a
 * probe hit's trap (not seen by bpf_stats) on a tight loop, A/B against no probe. Not a probe: no
 * module, not in BPFTRAIN_BPF_OBJECTS, loaded only by bpftrain-trap-bench. */
#ifndef BPFTRAIN_BPF_BENCH_TRAP_H
#define BPFTRAIN_BPF_BENCH_TRAP_H
#endif
