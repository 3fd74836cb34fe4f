// TCP queue depth of the targets' sockets. tcp:tcp_probe fires in softirq context, where the
// current task is not the socket's owner, so ownership is learned in process context
// (tcp:tcp_sendmsg_locked) and kept in the socket's own storage (BPF_MAP_TYPE_SK_STORAGE), which
// the kernel frees with the socket. Not a hash keyed by the socket address: a full hash refused
// sockets (and an LRU evicted live ones), every tcp_probe paid a hash lookup even on sockets no
// target owns, and a program on tcp_destroy_sock had to forget them; a socket without storage is
// seen at once, and the probe measured 1.60x an empty program against 1.95-2.06x with the hash
// (docs/probes.md). A storage the kernel cannot allocate is counted as lost. Depth samples are rate
// limited per socket (sample_interval_ns) and go through a ring buffer; a full one is counted too.
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

/* A target socket's owner lives in the socket itself (local storage): no capacity to run out of,
 * freed with the socket, and a socket that no target sent on has none, which tcp_probe sees
 * without a map lookup. */
struct {
  __uint(type, BPF_MAP_TYPE_SK_STORAGE);
  __uint(map_flags, BPF_F_NO_PREALLOC);
  __type(key, int);
  __type(value, struct tcp_owner);
} owners SEC(".maps");

struct {
  __uint(type, BPF_MAP_TYPE_RINGBUF);
  __uint(max_entries, 1 << 20);
} samples SEC(".maps");

/* Per CPU, the socket of the last target send that wrote an owner: a target sends in runs on one
 * socket (a partial write is one tcp_sendmsg_locked each), and the later sends of a run skip the
 * storage helper. One u64, so a program preempted mid-way never leaves half an entry. A socket
 * freed and made again at the same address starts with no storage, which the check of
 * sk_bpf_storage sees. A socket two targets send on counts under the one that wrote last on a
 * CPU's first send of a run. */
struct {
  __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
  __uint(max_entries, 1);
  __type(key, __u32);
  __type(value, __u64);
} last_owned SEC(".maps");

/* A socket that carries no local storage of any map (most sockets on a host: no target ever sent
 * on them) is told by one load of the socket's own pointer, before the storage lookup, which is a
 * helper call. */
static __always_inline bool mayHaveOwner(struct sock* sk) {
  if (!bpf_core_field_exists(sk->sk_bpf_storage)) return true;
  return sk->sk_bpf_storage != 0;
}

SEC("tp_btf/tcp_sendmsg_locked")
int BPF_PROG(on_tcp_sendmsg, struct sock* sk) {
  int slot = currentSlot();
  if (slot < 0) return 0;
  __u32 zero = 0;
  __u64* last = bpf_map_lookup_elem(&last_owned, &zero);
  if (last && *last == (__u64)sk && mayHaveOwner(sk)) return 0;
  struct tcp_owner* owner = bpf_sk_storage_get(&owners, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
  if (!owner) {  // no memory for the socket's storage
    BPFTRAIN_COUNT_LOST();
    return 0;
  }
  owner->slot = (__u32)slot;
  if (last) *last = (__u64)sk;
  return 0;
}

SEC("tp_btf/tcp_probe")
int BPF_PROG(on_tcp_probe, struct sock* sk) {
  if (!mayHaveOwner(sk)) return 0;
  struct tcp_owner* owner = bpf_sk_storage_get(&owners, sk, 0, 0);
  if (!owner) return 0;
  // Most segments of a busy socket arrive within the tick of its last sample: jiffies (a load the
  // verifier inlines) turns them away before the clock read, a helper call that costs more than
  // the rest of this path in a VM. So a socket is sampled at most once per tick and per
  // sample_interval_ns (with HZ=250, every 4 ms at most).
  const __u64 tick = bpf_jiffies64();
  if (tick == owner->last_sample_jiffies) return 0;
  __u64 now = bpf_ktime_get_ns();
  if (now - owner->last_sample_ns < sample_interval_ns) return 0;
  owner->last_sample_ns = now;
  owner->last_sample_jiffies = tick;
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
  const __u32 rate_delivered = tp->rate_delivered, rate_interval_us = tp->rate_interval_us;
  s->rate_delivered = rate_delivered;
  s->rate_interval_us = rate_interval_us;
  s->rate_is_new = rate_delivered != owner->last_rate_delivered ||
                   rate_interval_us != owner->last_rate_interval_us;
  owner->last_rate_delivered = rate_delivered;
  owner->last_rate_interval_us = rate_interval_us;
  s->mss = tp->mss_cache;
  s->app_limited = BPF_CORE_READ_BITFIELD(tp, rate_app_limited);
  const __u32 delivered = tp->delivered;
  s->acked_since_last = delivered != owner->last_delivered;
  owner->last_delivered = delivered;
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
int BPF_PROG(on_tcp_retransmit, struct sock* sk) {
  if (!mayHaveOwner(sk)) return 0;
  struct tcp_owner* owner = bpf_sk_storage_get(&owners, sk, 0, 0);
  if (!owner) return 0;
  struct tcp_counts* c = slotCounts(&counts, owner->slot);
  if (c) c->retransmits++;
  return 0;
}
