// TLB flushes and shootdowns in a target's context (the PMU-free TLB signal): the initiator of a
// shootdown (munmap/mprotect/migration) counts "remote_send_ipi"/"local_*", the CPUs that receive
// the IPI while running the target count "remote_shootdown".
// clang-format off
#include "vmlinux.h"  // first: the types every header below uses
// clang-format on

#include "bpf/tlb.h"

#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "bpf/lib/counters.bpf.h"
#include "bpf/lib/target.bpf.h"

char LICENSE[] SEC("license") = "GPL";

BPFTRAIN_COUNTS_MAP(struct tlb_flush_counts);

SEC("tp_btf/tlb_flush")
int BPF_PROG(on_tlb_flush, int reason, unsigned long pages) {
  struct tlb_flush_counts* c = slotCounts(&counts, currentSlot());
  __u32 index = (__u32)reason;
  barrier_var(index);  // keep the bound check on the index the verifier sees
  if (c && index < TLB_FLUSH_REASONS) c->flushes[index]++;
  return 0;
}
