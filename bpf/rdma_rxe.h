/* RDMA work requests as soft-RoCE (the rdma_rxe module) sees them in the kernel, for any verbs
 * program on an rxe device: kprobes on the driver's post-send doorbell, its per-work-request send
 * completion and its completion-queue post (bpf/rdma_rxe.bpf.c; docs/probes.md has the kernel
 * facts). Same metrics as rdma_verbs, labelled source="rxe".
 */
#ifndef BPFTRAIN_BPF_RDMA_RXE_H
#define BPFTRAIN_BPF_RDMA_RXE_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

/* Work request kinds by the send WQE's opcode (enum ib_uverbs_wr_opcode) and, for receives, by
 * the completion's opcode. Receives are completed here but not posted: a user-space rxe receive
 * queue has no doorbell, so the kernel never sees a receive being posted. */
enum rdma_rxe_op {
  RDMA_RXE_WRITE = 0,  /* RDMA_WRITE, RDMA_WRITE_WITH_IMM */
  RDMA_RXE_SEND = 1,   /* SEND, SEND_WITH_IMM, SEND_WITH_INV */
  RDMA_RXE_RECV = 2,   /* a receive completion (RECV, RECV_RDMA_WITH_IMM) */
  RDMA_RXE_READ = 3,   /* RDMA_READ */
  RDMA_RXE_ATOMIC = 4, /* compare-and-swap, fetch-and-add */
  RDMA_RXE_OTHER = 5,  /* local invalidate, memory-window bind, ... */
  RDMA_RXE_OP_COUNT = 6
};

struct rdma_rxe_counts {
  __u64 posted[RDMA_RXE_OP_COUNT];    /* send-queue WQEs found new at a doorbell */
  __u64 completed[RDMA_RXE_OP_COUNT]; /* do_complete per send WQE; rxe_cq_post per receive */
  __u64 write_bytes;                  /* bytes of the RDMA writes posted */
  __u64 unmatched;                    /* send completions with no post seen (posted before the
                                         probe attached, or the QP state was evicted) */
  __u64 qps_folded;                   /* QPs past RDMA_RXE_QP_LABELS in their process */
};

/* QPs of a process that get their own label (qp="0".."7", in the order the probe first sees their
 * doorbells); later ones share qp="other" (RDMA_RXE_QP_LABELS) and are counted in qps_folded. */
#define RDMA_RXE_QP_LABELS 8

/* Post times kept per queue pair (an RC send queue completes in order). */
#define RDMA_RXE_RING 256
/* Latency and depth are sampled 1 work request in this many (a power of two), chosen by each
 * send WQE's sequence number on its QP (the first posted is sampled): a sampled one's post time is
 * taken at its doorbell and its post -> completion latency at its completion, and both events emit
 * a depth sample. The counts (posted, completed, bytes, outstanding) take every work request: the
 * clock and the ring-buffer record are two of the few helper calls left per event (docs/probes.md,
 * "What a probe costs"). */
#define RDMA_RXE_SAMPLE_EVERY 8
/* New WQEs read per doorbell; more in one doorbell are counted as posted op "other" and lost. */
#define RDMA_RXE_MAX_PER_DOORBELL 64

struct rdma_rxe_sample {
  __u32 slot;
  __u32 outstanding;    /* send WQEs posted and not completed on the rank's rxe QPs, after this */
  __u64 completion_ns;  /* post -> completion of a send WQE; 0 for a post sample */
  __u32 qp;             /* the QP's label index, RDMA_RXE_QP_LABELS when folded */
  __u32 qp_outstanding; /* send WQEs outstanding on that QP, after this */
};

#endif
