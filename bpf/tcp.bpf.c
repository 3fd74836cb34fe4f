// TCP queue depth of the targets' sockets. tcp:tcp_probe fires in softirq context, where the
// current task is not the socket's owner, so ownership is learned in process context
// (tcp:tcp_sendmsg_locked) into a map keyed by the socket address, and forgotten when the socket
// is destroyed. A plain hash, not an LRU: an LRU evicted live sockets without a trace (and before
// it was full, per-CPU free lists running dry); a full hash refuses the insert, and each send of a
// socket it could not take is counted as lost. Depth samples are rate limited per socket
// (sample_interval_ns) and go through a ring buffer; a full one is counted too.
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/tcp.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

const volatile __u64 sample_interval_ns = 1000000; /* at most one depth sample per ms per socket */

BPFTRAIN_COUNTS_MAP(struct tcp_counts);
BPFTRAIN_LOST_MAP();

struct {
  __uint(type, BPF_MAP_TYPE_HASH);
  __uint(max_entries, 16384); /* user space may resize it before load (ProbeOptions) */
  __type(key, __u64);
  __type(value, struct tcp_owner);
} owners SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} samples SEC(".maps");

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(on_tcp_sendmsg, const struct sock* sk) {
  int slot = currentSlot();
  if (slot < 0) return 0;
  __u64 key = (__u64)sk;
  struct tcp_owner* owner = bpf_map_lookup_elem(&owners, &key);
  if (owner) {
    owner->slot = (__u32)slot;
    return 0;
  }
  struct tcp_owner fresh = {.slot = (__u32)slot};
  if (bpf_map_update_elem(&owners, &key, &fresh, BPF_NOEXIST) != 0 &&
      !bpf_map_lookup_elem(&owners, &key))
    BPFTRAIN_COUNT_LOST();
  return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(on_tcp_probe, struct sock* sk) {
  __u64 key = (__u64)sk;
  struct tcp_owner* owner = bpf_map_lookup_elem(&owners, &key);
  if (!owner) return 0;
  __u64 now = bpf_ktime_get_ns();
  if (now - owner->last_sample_ns < sample_interval_ns) return 0;
  owner->last_sample_ns = now;
  struct tcp_sock* tp = bpf_skc_to_tcp_sock(sk);
  if (!tp) return 0;
  struct tcp_counts* c = slotCounts(&counts, owner->slot);
  if (c) c->samples++;
  struct tcp_sample* s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
  if (!s) {
    BPFTRAIN_COUNT_LOST();
    return 0;
  }
  s->slot = owner->slot;
  s->cwnd = tp->snd_cwnd;
  s->bytes_in_flight = tp->snd_nxt - tp->snd_una;
  s->send_queue = tp->write_seq - tp->snd_una;
  s->srtt_us = tp->srtt_us >> 3;
  // The link: which addresses the socket joins (user space maps the peer to a node).
  const struct sock_common* skc = &sk->__sk_common;
  s->family = BPF_CORE_READ(skc, skc_family);
  s->dport = bpf_ntohs(BPF_CORE_READ(skc, skc_dport));
  __builtin_memset(s->saddr, 0, sizeof(s->saddr));
  __builtin_memset(s->daddr, 0, sizeof(s->daddr));
  if (s->family == 10 /* AF_INET6 */) {
    bpf_probe_read_kernel(s->saddr, 16, &skc->skc_v6_rcv_saddr);
    bpf_probe_read_kernel(s->daddr, 16, &skc->skc_v6_daddr);
  } else {
    bpf_probe_read_kernel(s->saddr, 4, &skc->skc_rcv_saddr);
    bpf_probe_read_kernel(s->daddr, 4, &skc->skc_daddr);
  }
  bpf_ringbuf_submit(s, 0);
  return 0;
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(on_tcp_retransmit, const struct sock* sk) {
  __u64 key = (__u64)sk;
  struct tcp_owner* owner = bpf_map_lookup_elem(&owners, &key);
  if (!owner) return 0;
  struct tcp_counts* c = slotCounts(&counts, owner->slot);
  if (c) c->retransmits++;
  return 0;
}

SEC("tp_btf/tcp_destroy_sock")
int BPF_PROG(on_tcp_destroy, struct sock* sk) {
  __u64 key = (__u64)sk;
  bpf_map_delete_elem(&owners, &key);
  return 0;
}
