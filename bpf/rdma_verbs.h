/* RDMA work requests as Gloo's ibverbs transport posts and completes them: uprobes on the exported
 * member functions of gloo::transport::ibverbs::Pair in the target's libgloo (no libibverbs symbol
 * is probeable: ibv_post_send and ibv_poll_cq are inline dispatches into the provider).
 */
#ifndef BPFTRAIN_BPF_RDMA_VERBS_H
#define BPFTRAIN_BPF_RDMA_VERBS_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

/* Work request kinds Gloo posts: RDMA write with immediate (the data), send (a memory region
 * announced to the peer), receive (for the peer's immediates and announcements). */
enum rdma_verbs_op { RDMA_OP_WRITE = 0, RDMA_OP_SEND = 1, RDMA_OP_RECV = 2, RDMA_OP_COUNT = 3 };

struct rdma_verbs_counts {
  __u64 posted[RDMA_OP_COUNT];    /* Pair::send(Buffer*), sendMemoryRegion, postReceive */
  __u64 completed[RDMA_OP_COUNT]; /* Pair::handleCompletion by the completion's opcode */
  __u64 write_bytes;              /* bytes of the RDMA writes posted */
  __u64 unmatched;                /* write completions with no post time (posted before attach,
                                     or more than RDMA_VERBS_RING in flight on one pair) */
};

/* Post times kept per pair: Gloo's send queue holds at most 8 (kSendCompletionQueueCapacity). */
#define RDMA_VERBS_RING 16

struct rdma_verbs_sample {
  __u32 slot;
  __u32 outstanding;   /* RDMA writes posted and not completed on the rank's pairs, after this */
  __u64 completion_ns; /* post -> completion of an RDMA write; 0 for a post sample */
};

#endif
