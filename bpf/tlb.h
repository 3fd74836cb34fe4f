/* tlb:tlb_flush per target, by enum tlb_flush_reason value. */
#ifndef BPFTRAIN_BPF_TLB_H
#define BPFTRAIN_BPF_TLB_H

#define TLB_FLUSH_REASONS 8

struct tlb_flush_counts {
  __u64 flushes[TLB_FLUSH_REASONS]; /* index: enum tlb_flush_reason; names come from BTF */
};

#endif
