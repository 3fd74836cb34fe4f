/* tlb:tlb_flush per target, by enum tlb_flush_reason value. */
#ifndef BPFTRAIN_BPF_TLB_H
#define BPFTRAIN_BPF_TLB_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

#define TLB_FLUSH_REASONS 8

struct tlb_flush_counts {
  __u64 flushes[TLB_FLUSH_REASONS]; /* index: enum tlb_flush_reason; names come from BTF */
};

#endif
