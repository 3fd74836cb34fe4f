/* RDMA queue pairs, seen through the USDT probes bpftrain:qp_post / bpftrain:qp_complete that a
 * process built with bpf/usdt/bpftrain_usdt.h fires (today only the test tool bpftrain-usdt-fire).
 */
#ifndef BPFTRAIN_BPF_USDT_QP_H
#define BPFTRAIN_BPF_USDT_QP_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

struct qp_counts {
  __u64 posts;       /* bpftrain:qp_post */
  __u64 completions; /* bpftrain:qp_complete */
};

struct qp_sample {
  __u32 slot;
  __u32 qp;
  __u32 outstanding; /* work requests posted and not yet completed, after this event */
  __u32 completion;  /* 1 for qp_complete, 0 for qp_post */
};

#endif
