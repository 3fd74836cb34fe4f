// RDMA work requests outstanding per queue pair, from the USDT probes bpftrain:qp_post(qp,
// outstanding) and bpftrain:qp_complete(qp, outstanding). They fire in any process built with
// bpf/usdt/bpftrain_usdt.h; today the only one is the test tool bpftrain-usdt-fire (no bpftrain
// component posts RDMA work requests yet).
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/usdt_qp.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

BPFTRAIN_COUNTS_MAP(struct qp_counts);
BPFTRAIN_LOST_MAP();

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} samples SEC(".maps");

static __always_inline void onQpEvent(long qp, long outstanding, __u32 completion) {
  int slot = currentSlot();
  struct qp_counts* c = slotCounts(&counts, slot);
  if (!c) return;
  if (completion)
    c->completions++;
  else
    c->posts++;
  struct qp_sample* s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
  if (!s) {
    BPFTRAIN_COUNT_LOST();
    return;
  }
  s->slot = (__u32)slot;
  s->qp = (__u32)qp;
  s->outstanding = (__u32)outstanding;
  s->completion = completion;
  bpf_ringbuf_submit(s, 0);
}

SEC("usdt")
int BPF_USDT(on_qp_post, long qp, long outstanding) {
  onQpEvent(qp, outstanding, 0);
  return 0;
}

SEC("usdt")
int BPF_USDT(on_qp_complete, long qp, long outstanding) {
  onQpEvent(qp, outstanding, 1);
  return 0;
}
