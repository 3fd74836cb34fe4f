// tcp: the TCP transport of target processes. Counters for retransmits and samples taken; a ring
// buffer of per-socket samples (at most one per socket per sample interval, a rodata setting)
// that become the queued-bytes, in-flight-bytes and RTT distributions.
#include "bpf/tcp.h"

#include "collector/loader/probe_module.h"
#include "tcp.skel.h"

namespace bpftrain::collector::loader::probes::tcp {
namespace {

class Object final : public RingProbeObject<tcp_sample, 3> {
 public:
  void onSample(const tcp_sample& sample) override {
    if (!sink().live(sample.slot)) return;
    auto& ids = series_[sample.slot];
    if (!series_.known(sample.slot)) {
      ids[0] = sink().series(sample.slot, metrics::kTransportQueuedBytes, "transport", "tcp");
      ids[1] = sink().series(sample.slot, metrics::kTransportRttSeconds, "transport", "tcp");
      ids[2] = sink().series(sample.slot, metrics::kTransportInflightBytes, "transport", "tcp");
    }
    // Queued bytes are what the application wrote and the peer has not acknowledged (SIOCOUTQ).
    // Bytes in flight alone fall when the receiver is slow (its window closes), so they are kept
    // as their own series.
    sink().record(ids[0], sample.send_queue);
    sink().record(ids[1], sample.srtt_us * 1e-6);
    sink().record(ids[2], sample.bytes_in_flight);
  }
};

const ProbeDef kProbes[] = {
    {"tcp",
     {"on_tcp_sendmsg", "on_tcp_probe", "on_tcp_retransmit", "on_tcp_destroy"},
     "tp_btf tcp:tcp_sendmsg_locked, tcp:tcp_probe, tcp:tcp_retransmit_skb"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  auto rodata = [&](tcp_bpf* skel) {
    skel->rodata->sample_interval_ns = env.options.tcp_sample_interval_ns;
  };
  // tcp_counts.retransmits, tcp_counts.samples
  return loadObject<tcp_counts, Object>(BPFTRAIN_SKELETON(tcp), kProbes, env, notes,
                                        {{0, &metrics::kTransportRetransmits, "transport", "tcp"},
                                         {0, &metrics::kTransportSamples, "transport", "tcp"}},
                                        rodata);
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::tcp
