// Work requests of Gloo's ibverbs transport, from uprobes on gloo::transport::ibverbs::Pair (the
// module attaches them per target process, by symbol, in the libgloo that process maps):
//   Pair::send(Buffer*, offset, length, roffset)  posts one RDMA write with immediate;
//   Pair::sendMemoryRegion(ibv_mr*, slot)          posts one send (a buffer announced to the peer);
//   Pair::postReceive()                            posts one receive;
//   Pair::handleCompletion(ibv_wc*)                one completion, its kind in wc->opcode.
// The completion's opcode is read from the caller's ibv_wc, a stack page that NUMA balancing may
// have just made PROT_NONE (its hinting scan, every 100 ms in numalab): a non-faulting read
// (bpf_probe_read_user) then fails and the completion would go uncounted (the likely cause of
// 1 write in 200 uncounted in a numalab CI run). So where the kernel runs sleepable uprobes (6.0
// and later) the completion program is sleepable and reads with bpf_copy_from_user, which takes the
// hinting fault; elsewhere a read that fails is counted as lost (bpftrain_probe_events_lost_total).
// An RC queue pair completes its sends in posting order, so each pair keeps a small ring of post
// times and a write's completion takes the oldest: post -> completion latency without reading
// Gloo's objects. A uprobe costs microseconds per hit: fine per message of a collective, which is
// what these functions see (docs/probes.md).
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/rdma_verbs.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

// One shared copy with atomic adds: before Linux 6.10 a per-CPU array lookup is a helper call.
BPFTRAIN_SHARED_COUNTS_MAP(struct rdma_verbs_counts);
BPFTRAIN_LOST_MAP();

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} samples SEC(".maps");

struct pair_key {
  __u32 tgid;
  __u32 pad;
  __u64 pair;  // the Pair object's address in that process
};

struct pair_state {
  __u64 posted;     // RDMA writes posted on this pair
  __u64 completed;  // ... and completed
  __u64 post_ns[RDMA_VERBS_RING];
};

struct {
  __uint(type, BPF_MAP_TYPE_LRU_HASH);
  __uint(max_entries, 4096);
  __type(key, struct pair_key);
  __type(value, struct pair_state);
} pairs SEC(".maps");

// RDMA writes outstanding per slot (all its pairs), for the samples.
struct {
  __uint(type, BPF_MAP_TYPE_ARRAY);
  __uint(max_entries, BPFTRAIN_MAX_SLOTS);
  __type(key, __u32);
  __type(value, __s64);
} outstanding SEC(".maps");

// ibv_wc_opcode (infiniband/verbs.h): what a completion finished.
#define WC_SEND 0
#define WC_RDMA_WRITE 1
#define WC_RECV 128
#define WC_RECV_RDMA_WITH_IMM 129

// One helper call and no wakeup: the collector drains the ring once per step and never sleeps on
// it (a wakeup is an irq_work self-IPI).
static __always_inline void sample(int slot, __s64 now_outstanding, __u64 completion_ns) {
  struct rdma_verbs_sample s = {
      .slot = (__u32)slot,
      .outstanding = now_outstanding > 0 ? (__u32)now_outstanding : 0,
      .completion_ns = completion_ns,
  };
  if (bpf_ringbuf_output(&samples, &s, sizeof(s), BPF_RB_NO_WAKEUP)) BPFTRAIN_COUNT_LOST();
}

static __always_inline struct pair_state* pairOf(__u64 pair, int create) {
  struct pair_key key = {.tgid = currentTgid(), .pair = pair};
  struct pair_state* state = bpf_map_lookup_elem(&pairs, &key);
  if (state || !create) return state;
  struct pair_state zero = {};
  bpf_map_update_elem(&pairs, &key, &zero, BPF_NOEXIST);
  return bpf_map_lookup_elem(&pairs, &key);
}

SEC("uprobe")
int BPF_KPROBE(on_pair_send, void* pair, void* buffer, __u64 offset, __u64 length) {
  int slot = currentSlot();
  struct rdma_verbs_counts* c = slotCounts(&counts, slot);
  if (!c) return 0;
  __sync_fetch_and_add(&c->posted[RDMA_OP_WRITE], 1);
  __sync_fetch_and_add(&c->write_bytes, length);
  struct pair_state* state = pairOf((__u64)pair, 1);
  if (!state) {  // the pair map refused a new entry: this write's latency and depth are lost
    BPFTRAIN_COUNT_LOST();
    return 0;
  }
  state->post_ns[state->posted % RDMA_VERBS_RING] = bpf_ktime_get_ns();
  state->posted++;
  __u32 key = (__u32)slot;
  __s64* out = bpf_map_lookup_elem(&outstanding, &key);
  if (!out) return 0;
  __s64 now = __sync_add_and_fetch(out, 1);
  sample(slot, now, 0);
  return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_pair_send_memory_region, void* pair) {
  struct rdma_verbs_counts* c = slotCounts(&counts, currentSlot());
  if (c) __sync_fetch_and_add(&c->posted[RDMA_OP_SEND], 1);
  return 0;
}

SEC("uprobe")
int BPF_KPROBE(on_pair_post_receive, void* pair) {
  struct rdma_verbs_counts* c = slotCounts(&counts, currentSlot());
  if (c) __sync_fetch_and_add(&c->posted[RDMA_OP_RECV], 1);
  return 0;
}

// One completion of kind `opcode` on `pair`.
static __always_inline int completion(void* pair, __u32 opcode) {
  int slot = currentSlot();
  struct rdma_verbs_counts* c = slotCounts(&counts, slot);
  if (!c) return 0;
  switch (opcode) {
    case WC_SEND:
      __sync_fetch_and_add(&c->completed[RDMA_OP_SEND], 1);
      return 0;
    case WC_RECV:
    case WC_RECV_RDMA_WITH_IMM:
      __sync_fetch_and_add(&c->completed[RDMA_OP_RECV], 1);
      return 0;
    case WC_RDMA_WRITE:
      break;
    default:
      return 0;
  }
  __sync_fetch_and_add(&c->completed[RDMA_OP_WRITE], 1);
  __u64 latency = 0;
  struct pair_state* state = pairOf((__u64)pair, 0);
  if (state && state->completed < state->posted &&
      state->posted - state->completed <= RDMA_VERBS_RING) {
    latency = bpf_ktime_get_ns() - state->post_ns[state->completed % RDMA_VERBS_RING];
    state->completed++;
  } else {
    __sync_fetch_and_add(&c->unmatched, 1);  // its post was not counted in `outstanding` either
    return 0;
  }
  __u32 key = (__u32)slot;
  __s64* out = bpf_map_lookup_elem(&outstanding, &key);
  if (!out) return 0;
  __s64 now = __sync_add_and_fetch(out, -1);
  sample(slot, now, latency > 0 ? latency : 1);
  return 0;
}

// struct ibv_wc: wr_id (8 bytes), status (4), opcode (4) ...
#define WC_OPCODE_OFFSET 12

// Where sleepable uprobes load (the loader tries this one first): the read may fault the page in.
SEC("uprobe.s")
int BPF_KPROBE(on_pair_handle_completion_sleepable, void* pair, void* wc) {
  __u32 opcode = 0;
  if (bpf_copy_from_user(&opcode, sizeof(opcode), (char*)wc + WC_OPCODE_OFFSET)) {
    BPFTRAIN_COUNT_LOST();
    return 0;
  }
  return completion(pair, opcode);
}

// Before 6.0: no fault may be taken, and a page NUMA balancing unmapped loses the completion.
SEC("uprobe")
int BPF_KPROBE(on_pair_handle_completion, void* pair, void* wc) {
  __u32 opcode = 0;
  if (bpf_probe_read_user(&opcode, sizeof(opcode), (char*)wc + WC_OPCODE_OFFSET)) {
    BPFTRAIN_COUNT_LOST();
    return 0;
  }
  return completion(pair, opcode);
}
