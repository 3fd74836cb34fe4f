// Work requests on soft-RoCE (rdma_rxe), seen in the kernel for any verbs program, whatever library
// posts them. Three functions of the driver (Debian's 6.1 rdma_rxe; names and layouts checked
// there, docs/probes.md):
//   rxe_post_send(ibqp, ...)   the doorbell: librxe writes each WQE into the send queue it shares
//                              with the kernel and then write()s the uverbs file, which ends here
//                              in the posting process. New WQEs are those between the producer
//                              index seen at the QP's last doorbell and the one now.
//   do_complete(qp, wqe)       one send WQE retired, signaled or not (the completer, often in
//                              softirq: the QP's state says whose it is).
//   rxe_cq_post(cq, cqe, ...)  a completion queued; only receives are taken from here (a receive
//                              is never posted through the kernel: librxe's post_recv has no
//                              doorbell), attributed to the process that created the CQ.
// An RC send queue completes in order, so each QP keeps a ring of post times and ops, and a
// completion takes the oldest: post -> completion latency (sampled, RDMA_RXE_SAMPLE_EVERY). User
// QPs and CQs only (kernel ULPs are no rank).
// Each function has an fentry program and a kprobe program with the same body; the module attaches
// fentry where the kernel can (a BPF trampoline is a direct call: under TCG a kprobe's trap cost
// several times the whole fentry hit, and fentry skips no run while another BPF program runs) and
// the kprobes otherwise. Every helper call is most of a run's cost under TCG, so the common path
// makes few: the counters are a shared array (inlined lookup, atomic adds), a WQE's opcode and
// length are one read, its op is kept for its completion, and the clock and the ring buffer are
// used only for sampled work requests.
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/rdma_rxe.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

BPFTRAIN_SHARED_COUNTS_MAP(struct rdma_rxe_counts);  // atomic adds: see the top
BPFTRAIN_LOST_MAP();

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} samples SEC(".maps");

// The driver's types, as far as the probe reads them; CO-RE finds the fields in the module's BTF
// (rdma_rxe, ib_core), so nothing here is a fixed offset. Suffixed: not the host's vmlinux.h types.
struct rdma_restrack_entry___bpftrain {
  struct task_struct* task;  // the creating task, for user objects
} __attribute__((preserve_access_index));
struct ib_qp___bpftrain {
  struct rdma_restrack_entry___bpftrain res;
  __u32 qp_num;
} __attribute__((preserve_access_index));
struct ib_cq___bpftrain {
  struct rdma_restrack_entry___bpftrain res;
} __attribute__((preserve_access_index));
// Shared with user space (mmap'ed): the indices are masked ring positions.
struct rxe_queue_buf___bpftrain {
  __u32 log2_elem_size;
  __u32 index_mask;
  __u32 producer_index;
  __u32 consumer_index;
} __attribute__((preserve_access_index));
struct rxe_queue___bpftrain {
  struct rxe_queue_buf___bpftrain* buf;
} __attribute__((preserve_access_index));
struct rxe_sq___bpftrain {
  struct rxe_queue___bpftrain* queue;
} __attribute__((preserve_access_index));
struct rxe_qp___bpftrain {
  struct ib_qp___bpftrain ibqp;
  bool is_user;
  struct rxe_sq___bpftrain sq;
} __attribute__((preserve_access_index));
struct rxe_cq___bpftrain {
  struct ib_cq___bpftrain ibcq;
  bool is_user;
} __attribute__((preserve_access_index));
struct rxe_send_wr___bpftrain {
  __u32 opcode;
} __attribute__((preserve_access_index));
struct rxe_dma_info___bpftrain {
  __u32 length;
} __attribute__((preserve_access_index));
struct rxe_send_wqe___bpftrain {
  struct rxe_send_wr___bpftrain wr;
  struct rxe_dma_info___bpftrain dma;
} __attribute__((preserve_access_index));

// uapi rdma/ib_user_verbs.h: struct ib_uverbs_wc's opcode (after u64 wr_id, u32 status), the first
// member of a user CQ's struct rxe_cqe; and the opcodes of enum ib_uverbs_wr_opcode.
#define UVERBS_WC_OPCODE_OFFSET 12
#define UVERBS_WC_RECV 128
#define WR_RDMA_WRITE 0
#define WR_RDMA_WRITE_WITH_IMM 1
#define WR_SEND 2
#define WR_SEND_WITH_IMM 3
#define WR_RDMA_READ 4
#define WR_ATOMIC_CMP_AND_SWP 5
#define WR_ATOMIC_FETCH_AND_ADD 6
#define WR_SEND_WITH_INV 9

struct qp_state {
  __u32 tgid;
  __s32 slot;       // the poster's slot at its last doorbell
  __u32 qpn;        // the QP number: another QP at a freed one's address is a new QP
  __u32 mask;       // the send queue's index mask and log2 of its WQE size, read once
  __u64 last_prod;  // producer index after the WQEs already counted (u64: cmpxchg'ed)
  __u32 next_cons;  // the send-queue index do_complete should retire next
  __u32 qp_index;   // its label: the order its process's QPs were first seen, capped
  __u64 posted;     // send WQEs counted as posted on this QP
  __u64 completed;  // ... and completed
  __u64 buf;        // the send queue's shared buffer (struct rxe_queue_buf *), fixed for its life
  __u64 data_off;   // its first WQE's address less the struct rxe_qp's, fixed for its life
  __u32 log2;
  __u32 pad;
  __u64 post_ns[RDMA_RXE_RING];  // post times of the sampled WQEs, by sequence number
  __u8 post_op[RDMA_RXE_RING];   // every WQE's op (enum rdma_rxe_op), by sequence number
};

// Keyed by address, which the slab hands to the next QP once a QP is destroyed: the state also
// holds the QP number (rxe allocates them cyclically), and a state whose number differs belongs to
// a gone QP. Without that check, a bystander's QP at a target's old address had its posts claimed
// for the target's slot at every completion.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, __u64);  // the struct rxe_qp's address
  __type(value, struct qp_state);
} qps SEC(".maps");

// QPs seen per process, for their labels.
struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 1024);
  __type(key, __u32);  // tgid
  __type(value, __u64);
} qps_seen SEC(".maps");

// A zeroed qp_state to insert from: the struct is larger than the BPF stack.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, struct qp_state);
} empty_state SEC(".maps");

// Send WQEs outstanding per slot (all its QPs), for the samples.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, BPFTRAIN_MAX_SLOTS);
  __type(key, __u32);
  __type(value, __s64);
} outstanding SEC(".maps");

static __always_inline int opOfWr(__u32 opcode) {
  switch (opcode) {
    case WR_RDMA_WRITE:
    case WR_RDMA_WRITE_WITH_IMM:
      return RDMA_RXE_WRITE;
    case WR_SEND:
    case WR_SEND_WITH_IMM:
    case WR_SEND_WITH_INV:
      return RDMA_RXE_SEND;
    case WR_RDMA_READ:
      return RDMA_RXE_READ;
    case WR_ATOMIC_CMP_AND_SWP:
    case WR_ATOMIC_FETCH_AND_ADD:
      return RDMA_RXE_ATOMIC;
    default:
      return RDMA_RXE_OTHER;
  }
}

static __always_inline __u32 boundedOp(int op) {
  return op >= 0 && op < RDMA_RXE_OP_COUNT ? (__u32)op : RDMA_RXE_OTHER;
}

static __always_inline bool sampledSeq(__u64 seq) {
  return (seq & (RDMA_RXE_SAMPLE_EVERY - 1)) == 0;
}

// The slot's outstanding count moves at every event (an inlined array and an atomic add); a sample
// (one helper call: bpf_ringbuf_output copies from the stack) only when `emit`. No wakeup: the
// collector drains the ring once per step and never sleeps on it, and a wakeup is an irq_work
// self-IPI.
static __always_inline void depth(int slot, const struct qp_state* state, __s64 delta, bool emit,
                                  __u64 completion_ns) {
  __u32 key = (__u32)slot;
  __s64* out = bpf_map_lookup_elem(&outstanding, &key);
  if (!out) return;
  __s64 now = __sync_add_and_fetch(out, delta);
  if (!emit) return;
  struct rdma_rxe_sample s = {
      .slot = (__u32)slot,
      .outstanding = now > 0 ? (__u32)now : 0,
      .completion_ns = completion_ns,
      .qp = state->qp_index,
      .qp_outstanding = (__u32)(state->posted - state->completed),
  };
  if (bpf_ringbuf_output(&samples, &s, sizeof(s), BPF_RB_NO_WAKEUP)) BPFTRAIN_COUNT_LOST();
}

static __always_inline int slotOfTask(struct task_struct* task) {
  if (!task) return -1;
  __u64 cgroup_id = 0;
  if (target_by_cgroup) cgroup_id = BPF_CORE_READ(task, cgroups, dfl_cgrp, kn, id);
  return slotOfIds(BPF_CORE_READ(task, tgid), cgroup_id);
}

// A WQE's opcode and length in one read (one helper call, not two): the bytes from wr.opcode to
// the end of dma.length, whose offsets CO-RE gives as constants.
#define WQE_SPAN_MAX 256
static __always_inline void readWqe(const void* wqe, __u32* opcode, __u32* length) {
  const __u32 from = bpf_core_field_offset(struct rxe_send_wqe___bpftrain, wr.opcode);
  const __u32 to = bpf_core_field_offset(struct rxe_send_wqe___bpftrain, dma.length) + 4;
  __u8 span[WQE_SPAN_MAX];
  if (to > from && to - from <= WQE_SPAN_MAX) {
    if (bpf_probe_read_kernel(span, to - from, (const char*)wqe + from)) {
      *opcode = ~0u;
      *length = 0;
      return;
    }
    *opcode = *(__u32*)span;
    *length = *(__u32*)(span + (to - from) - 4);
    return;
  }
  *opcode = BPF_CORE_READ((struct rxe_send_wqe___bpftrain*)wqe, wr.opcode);
  *length = BPF_CORE_READ((struct rxe_send_wqe___bpftrain*)wqe, dma.length);
}

// Counts the WQEs between the QP's last claimed producer index and the one now as posted, once:
// the doorbell and do_complete both claim (a skipped doorbell's WQEs, or ones the requester
// retired before their doorbell's program ran, are found by the next event on the QP), and
// cmpxchg gives a range to one of them only. The queue's geometry is the state's (read when the
// QP was first seen): each kernel read here is a helper call.
static __always_inline void claimPosts(struct qp_state* state, struct rdma_rxe_counts* c,
                                       int slot) {
  struct rxe_queue_buf___bpftrain* buf = (void*)state->buf;
  const __u32 mask = state->mask;
  const __u32 log2 = state->log2 & 31;
  const __u32 prod = BPF_CORE_READ(buf, producer_index) & mask;
  const __u64 old = state->last_prod;
  const __u32 fresh = (prod - (__u32)old) & mask;
  if (fresh == 0) return;
  if (__sync_val_compare_and_swap(&state->last_prod, old, (__u64)prod) != old) return;
  const __u64 base = __sync_fetch_and_add(&state->posted, (__u64)fresh);
  const char* data = (const char*)buf + bpf_core_type_size(struct rxe_queue_buf___bpftrain);
  // The first sampled sequence number in [base, base + fresh): the clock only if there is one.
  const __u32 first_sampled =
      (__u32)((RDMA_RXE_SAMPLE_EVERY - (base & (RDMA_RXE_SAMPLE_EVERY - 1))) &
              (RDMA_RXE_SAMPLE_EVERY - 1));
  const bool sampled = first_sampled < fresh;
  const __u64 now = sampled ? bpf_ktime_get_ns() : 0;
  __u64 bytes = 0;
  __u32 i = 0;
  for (; i < RDMA_RXE_MAX_PER_DOORBELL; i++) {
    if (i >= fresh) break;
    const __u32 index = ((__u32)old + i) & mask;
    __u32 opcode = 0, length = 0;
    readWqe(data + ((__u64)index << log2), &opcode, &length);
    const __u32 op = boundedOp(opOfWr(opcode));
    __sync_fetch_and_add(&c->posted[op], 1);
    if (op == RDMA_RXE_WRITE) bytes += length;
    const __u64 seq = base + i;
    state->post_op[seq % RDMA_RXE_RING] = (__u8)op;
    if (sampledSeq(seq)) state->post_ns[seq % RDMA_RXE_RING] = now;
  }
  if (bytes) __sync_fetch_and_add(&c->write_bytes, bytes);
  if (fresh > i) {  // more than one event reads: counted, their kind and post time lost
    __sync_fetch_and_add(&c->posted[RDMA_RXE_OTHER], fresh - i);
    BPFTRAIN_COUNT_LOST();
  }
  depth(slot, state, fresh, sampled, 0);
}

// The doorbell. Ordered so that the common case reads least: the slot first (no helper: a per-CPU
// load and an inlined array), then the QP's state; only a QP seen for the first time (or a new QP
// at a gone one's address) reads the driver's objects beyond its number and producer index.
// qp_addr: the struct rxe_qp's address as a number (fentry's argument is a typed pointer, which
// the program may compare and subtract but not store as a number: read_qp_addr then reads it).
static __always_inline int postSend(void* ibqp, __u32 qpn, const __u64* qp_arg) {
  const int slot = currentSlot();
  if (slot < 0) return 0;
  struct rxe_qp___bpftrain* qp =
      (void*)((char*)ibqp - bpf_core_field_offset(struct rxe_qp___bpftrain, ibqp));
  __u64 key = (__u64)qp;
  struct qp_state* state = bpf_map_lookup_elem(&qps, &key);
  struct rdma_rxe_counts* c = slotCounts(&counts, slot);
  if (!c) return 0;
  if (!state || state->qpn != qpn) {
    if (!BPF_CORE_READ(qp, is_user)) return 0;  // a kernel ULP's QP: posts WRs itself, no process
    struct rxe_queue_buf___bpftrain* buf = BPF_CORE_READ(qp, sq.queue, buf);
    if (!buf) return 0;
    __u64 qp_addr = 0;
    if (bpf_probe_read_kernel(&qp_addr, sizeof(qp_addr), qp_arg)) return 0;
    qp_addr -= bpf_core_field_offset(struct rxe_qp___bpftrain, ibqp);
    __u32 zero = 0;
    struct qp_state* empty = bpf_map_lookup_elem(&empty_state, &zero);
    if (!empty) return 0;
    // A gone QP's state at this address is replaced; a fresh one is created once.
    bpf_map_update_elem(&qps, &key, empty, state ? BPF_ANY : BPF_NOEXIST);
    state = bpf_map_lookup_elem(&qps, &key);
    if (!state) {  // the map refused it: these posts' latency and depth are lost
      BPFTRAIN_COUNT_LOST();
      return 0;
    }
    state->qpn = qpn;
    state->buf = (__u64)buf;
    state->data_off = (__u64)buf + bpf_core_type_size(struct rxe_queue_buf___bpftrain) - qp_addr;
    state->mask = BPF_CORE_READ(buf, index_mask);
    state->log2 = BPF_CORE_READ(buf, log2_elem_size) & 31;
    // First doorbell seen: what the completer has not retired yet is posted from now on.
    state->next_cons = BPF_CORE_READ(buf, consumer_index) & state->mask;
    state->last_prod = state->next_cons;
    __u32 tgid = currentTgid();
    __u64 none = 0;
    bpf_map_update_elem(&qps_seen, &tgid, &none, BPF_NOEXIST);
    __u64* seen = bpf_map_lookup_elem(&qps_seen, &tgid);
    const __u64 index = seen ? __sync_fetch_and_add(seen, 1) : RDMA_RXE_QP_LABELS;
    state->qp_index = index < RDMA_RXE_QP_LABELS ? (__u32)index : RDMA_RXE_QP_LABELS;
    if (index >= RDMA_RXE_QP_LABELS) __sync_fetch_and_add(&c->qps_folded, 1);
  }
  state->tgid = currentTgid();
  state->slot = slot;
  claimPosts(state, c, slot);
  return 0;
}

// One send WQE retired. wqe_off: the WQE's address less the struct rxe_qp's (a difference of two
// typed pointers is a number to the verifier, the pointers themselves are not).
static __always_inline int doComplete(void* qp_ptr, void* wqe, __u64 wqe_off, __u32 qpn) {
  struct rxe_qp___bpftrain* qp = qp_ptr;
  __u64 key = (__u64)qp_ptr;
  struct qp_state* state = bpf_map_lookup_elem(&qps, &key);
  if (state && state->qpn != qpn)
    state = 0;  // a gone QP's, at this one's address: this QP's doorbells were never seen
  int slot = state ? state->slot : slotOfTask(BPF_CORE_READ(qp, ibqp.res.task));
  struct rdma_rxe_counts* c = slotCounts(&counts, slot);
  if (!c) return 0;
  if (!state) {
    __sync_fetch_and_add(&c->completed[boundedOp(opOfWr(
                             BPF_CORE_READ((struct rxe_send_wqe___bpftrain*)wqe, wr.opcode)))],
                         1);
    __sync_fetch_and_add(&c->unmatched, 1);  // its post was not counted in `outstanding` either
    return 0;
  }
  // The WQE's queue position, from its offset and the state's geometry (no read).
  const __u32 mask = state->mask;
  const __u32 log2 = state->log2 & 31;
  const __u32 index = (__u32)((wqe_off - state->data_off) >> log2) & mask;
  // A WQE beyond those counted as posted: its doorbell's program was skipped or has not run yet
  // (the requester may send a WQE before that), and the producer index (one read) finds it. Only
  // then: the common completion reads no queue index.
  if (((index - state->next_cons) & mask) >= state->posted - state->completed)
    claimPosts(state, c, slot);
  if (state->completed >= state->posted) {
    __sync_fetch_and_add(&c->completed[boundedOp(opOfWr(
                             BPF_CORE_READ((struct rxe_send_wqe___bpftrain*)wqe, wr.opcode)))],
                         1);
    __sync_fetch_and_add(&c->unmatched, 1);
    return 0;
  }
  // A kprobe is skipped, uncounted before 6.7, while another kprobe program or a BPF map syscall
  // runs on the CPU (bpf_prog_active); an fentry program only when it would recurse on its CPU.
  // The WQE's queue position says whether earlier ones were retired unseen: they are completed
  // now, without latency, and counted as lost.
  __u32 skipped = (index - state->next_cons) & mask;
  if (skipped > state->posted - state->completed - 1)
    skipped = 0;  // not a position this QP has outstanding: trust the event alone
  // The kind of the first one is its post's, the rest (rarer still) are op "other": a loop here
  // came out of clang with a back-edge the 6.1 verifier refuses.
  if (skipped > 0) {
    __sync_fetch_and_add(&c->completed[boundedOp(state->post_op[state->completed % RDMA_RXE_RING])],
                         1);
    if (skipped > 1) __sync_fetch_and_add(&c->completed[RDMA_RXE_OTHER], skipped - 1);
    state->completed += skipped;
    depth(slot, state, -(__s64)skipped, false, 0);
    __u32 zero = 0;
    __u64* lost_value = bpf_map_lookup_elem(&lost, &zero);
    if (lost_value) *lost_value += skipped;
  }
  state->next_cons = (index + 1) & mask;
  const __u64 seq = state->completed;
  const bool in_ring = state->posted - seq <= RDMA_RXE_RING;
  // Its op as its doorbell read it (the ring holds the last RDMA_RXE_RING posts), else a read.
  const __u32 op =
      in_ring ? boundedOp(state->post_op[seq % RDMA_RXE_RING])
              : boundedOp(opOfWr(BPF_CORE_READ((struct rxe_send_wqe___bpftrain*)wqe, wr.opcode)));
  __sync_fetch_and_add(&c->completed[op], 1);
  const bool sampled = sampledSeq(seq);
  __u64 latency = 0;  // 0: a depth sample only
  if (sampled) {
    if (in_ring)
      latency = bpf_ktime_get_ns() - state->post_ns[seq % RDMA_RXE_RING] + 1;
    else
      BPFTRAIN_COUNT_LOST();  // its post time was overwritten: no latency sample
  }
  state->completed = seq + 1;
  depth(slot, state, -1, sampled, latency);
  return 0;
}

// A receive completion; opcode: the CQE's (struct ib_uverbs_wc's) opcode, read first so that a
// send's completion (do_complete counted it) costs nothing more. A kernel CQ's entry has another
// layout, so whatever that read finds there is_user then refuses.
static __always_inline int cqPost(struct rxe_cq___bpftrain* cq, __u32 opcode) {
  if (!(opcode & UVERBS_WC_RECV)) return 0;
  if (!BPF_CORE_READ(cq, is_user)) return 0;
  struct rdma_rxe_counts* c = slotCounts(&counts, slotOfTask(BPF_CORE_READ(cq, ibcq.res.task)));
  if (c) __sync_fetch_and_add(&c->completed[RDMA_RXE_RECV], 1);
  return 0;
}

// ---- fentry: the arguments are typed pointers (BTF), their fields read by plain loads where the
// argument's own type has them; CO-RE places the loads.

struct ib_uverbs_wc___bpftrain {
  __u32 opcode;
} __attribute__((preserve_access_index));
struct rxe_cqe___bpftrain {
  struct ib_uverbs_wc___bpftrain uibwc;
} __attribute__((preserve_access_index));

SEC("fentry/rxe_post_send")
int BPF_PROG(on_post_send_fentry, struct ib_qp___bpftrain* ibqp) {
  return postSend(ibqp, ibqp->qp_num, &ctx[0]);
}

SEC("fentry/do_complete")
int BPF_PROG(on_do_complete_fentry, struct rxe_qp___bpftrain* qp, void* wqe) {
  __u64 wqe_off = (const char*)wqe - (const char*)qp;
  barrier_var(wqe_off);  // a number from here on: no pointer arithmetic on it
  return doComplete(qp, wqe, wqe_off, qp->ibqp.qp_num);
}

SEC("fentry/rxe_cq_post")
int BPF_PROG(on_cq_post_fentry, struct rxe_cq___bpftrain* cq, struct rxe_cqe___bpftrain* cqe) {
  return cqPost(cq, cqe->uibwc.opcode);
}

// ---- kprobes: the same bodies, every field read through a helper.

SEC("kprobe/rxe_post_send")
int BPF_KPROBE(on_post_send, void* ibqp) {
  const __u64 ibqp_addr = (__u64)ibqp;
  return postSend(ibqp, BPF_CORE_READ((struct ib_qp___bpftrain*)ibqp, qp_num), &ibqp_addr);
}

SEC("kprobe/do_complete")
int BPF_KPROBE(on_do_complete, struct rxe_qp___bpftrain* qp, void* wqe) {
  return doComplete(qp, wqe, (__u64)wqe - (__u64)qp, BPF_CORE_READ(qp, ibqp.qp_num));
}

SEC("kprobe/rxe_cq_post")
int BPF_KPROBE(on_cq_post, struct rxe_cq___bpftrain* cq, void* cqe) {
  __u32 opcode = 0;
  if (bpf_probe_read_kernel(&opcode, sizeof(opcode), (char*)cqe + UVERBS_WC_OPCODE_OFFSET))
    return 0;
  return cqPost(cq, opcode);
}
