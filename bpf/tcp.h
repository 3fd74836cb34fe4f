/* TCP transport of target processes: queue depth (bytes in flight), smoothed RTT, delivery rate,
 * retransmits. */
#ifndef BPFTRAIN_BPF_TCP_H
#define BPFTRAIN_BPF_TCP_H

#ifndef __VMLINUX_H__ /* user space; BPF code has the types from vmlinux.h */
#include <linux/types.h>
#endif

struct tcp_counts {
  __u64 retransmits; /* tcp:tcp_retransmit_skb on a target's socket */
  __u64 samples;     /* depth samples offered to the ring buffer */
};

/* One ring buffer record per sampled tcp:tcp_probe. The socket's addresses let user space tell
 * which link the sample travelled (same host or which other host): AF_INET addresses fill the first
 * 4 bytes of saddr/daddr and leave the rest 0; AF_INET6 fills all 16 (v4-mapped ones included). */
struct tcp_sample {
  __u32 slot;
  __u32 cwnd;            /* segments */
  __u32 bytes_in_flight; /* snd_nxt - snd_una: sent, not yet acknowledged */
  __u32 send_queue;      /* write_seq - snd_una: written by the application, not yet acknowledged */
  __u32 srtt_us;
  /* The kernel's last delivery-rate sample (tcp_rate.c): rate_delivered segments of mss bytes
   * acknowledged over rate_interval_us. With app_limited 0 the sender had data to send, so it is
   * what the path carried: a throttled link shows here when its RTT does not (BBR keeps the
   * bottleneck queue short). rate_interval_us 0: no sample yet. */
  __u32 rate_delivered;
  __u32 rate_interval_us;
  __u32 mss;
  __u32 app_limited;
  /* 1 when the socket's own data was acknowledged since its previous sample (tcp_sock.delivered
   * moved). srtt_us and the delivery rate only change on such acknowledgements, so with 0 they are
   * from the socket's last send, however long ago: tcp:tcp_probe fires on every segment received,
   * and a ring's rank receives from one neighbour on a socket it has not sent on since setup. */
  __u32 acked_since_last;
  /* 1 when rate_delivered/rate_interval_us differ from the socket's previous sample: the kernel
   * keeps "the last non-app-limited or the highest app-limited" rate sample (tcp_rate_gen), so a
   * socket whose later sends are small (app-limited, fewer segments per round trip) repeats an
   * older, faster sample at every acknowledgement, with app_limited 0. */
  __u32 rate_is_new;
  __u16 family; /* AF_INET (2) or AF_INET6 (10) */
  __u16 dport;  /* host byte order */
  __u8 saddr[16];
  __u8 daddr[16];
};

/* Which target owns a socket; learned when the target sends on it (process context). */
struct tcp_owner {
  __u32 slot;
  __u32 last_delivered; /* tcp_sock.delivered at the previous sample */
  __u64 last_sample_ns;
  __u64 last_sample_jiffies;
  __u32 last_rate_delivered; /* the rate sample the previous sample read */
  __u32 last_rate_interval_us;
};

#endif
