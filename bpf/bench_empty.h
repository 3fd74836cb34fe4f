/* bench_empty: programs that do nothing, one per tracepoint the probes use, so that
 * tools/bench probes can price each probe against the bare cost of running a program there
 * (issue 14: every probe <= 1.5x an empty program on the same tracepoint), and variants of the
 * slot lookup for --variants. Not a probe: no module, not in BPFTRAIN_BPF_OBJECTS, loaded only by
 * bpftrain-probe-bench. */
#ifndef BPFTRAIN_BPF_BENCH_EMPTY_H
#define BPFTRAIN_BPF_BENCH_EMPTY_H
#endif
