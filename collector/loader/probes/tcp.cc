// tcp: the TCP transport of target processes. Counters for retransmits and samples taken; a ring
// buffer of per-socket samples (at most one per socket per sample interval, a rodata setting)
// that become the queued-bytes, in-flight-bytes and RTT distributions.
#include "bpf/tcp.h"

#include "collector/loader/probe_module.h"
#include "tcp.skel.h"

namespace bpftrain::collector::loader::probes::tcp {
namespace {

class Object final : public ProbeObject {
 public:
  Status openRing(const bpf_map* samples) {
    auto ring = RingReader<tcp_sample>::open(samples, this);
    if (!ring.ok()) return ring.status();
    ring_ = ring.take();
    return {};
  }

  Status consume(SampleSink& sink) override {
    sink_ = &sink;
    Status status = ring_.consume();
    sink_ = nullptr;
    return status;
  }

  void releaseSlot(uint32_t slot) override { series_.forget(slot); }

  void onSample(const tcp_sample& sample) {
    if (!sink_->live(sample.slot)) return;
    auto& ids = series_[sample.slot];
    if (!series_.known(sample.slot)) {
      ids[0] = sink_->series(sample.slot, metrics::kTransportQueuedBytes, "transport", "tcp");
      ids[1] = sink_->series(sample.slot, metrics::kTransportRttSeconds, "transport", "tcp");
      ids[2] = sink_->series(sample.slot, metrics::kTransportInflightBytes, "transport", "tcp");
    }
    // Queued bytes are what the application wrote and the peer has not acknowledged (SIOCOUTQ).
    // Bytes in flight alone fall when the receiver is slow (its window closes), so they are kept
    // as their own series.
    sink_->record(ids[0], sample.send_queue);
    sink_->record(ids[1], sample.srtt_us * 1e-6);
    sink_->record(ids[2], sample.bytes_in_flight);
  }

 private:
  RingReader<tcp_sample> ring_;
  SlotSeries<3> series_;
  SampleSink* sink_ = nullptr;  // set while consuming
};

class Module final : public ProbeModule {
 public:
  std::span<const ProbeDef> probes() const override {
    static const ProbeDef kProbes[] = {
        {"tcp",
         {"on_tcp_sendmsg", "on_tcp_probe", "on_tcp_retransmit", "on_tcp_destroy"},
         "tp_btf tcp:tcp_sendmsg_locked, tcp:tcp_probe, tcp:tcp_retransmit_skb"},
    };
    return kProbes;
  }

  Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) const override {
    auto obj = std::make_unique<Object>();
    tcp_bpf* skel = nullptr;
    BPFTRAIN_TRY(
        obj->openSkeleton(skel, tcp_bpf__open, tcp_bpf__destroy, "tcp", probes(), env, notes));
    skel->rodata->sample_interval_ns = env.options.tcp_sample_interval_ns;
    BPFTRAIN_TRY(obj->loadSkeleton(skel, tcp_bpf__load, "tcp"));
    // tcp_counts.retransmits, tcp_counts.samples
    BPFTRAIN_TRY(
        obj->setCounters<tcp_counts>(skel->maps.counts, env,
                                     {{0, &metrics::kTransportRetransmits, "transport", "tcp"},
                                      {0, &metrics::kTransportSamples, "transport", "tcp"}}));
    BPFTRAIN_TRY(obj->setLost(skel->maps.lost, env, 0));
    BPFTRAIN_TRY(obj->openRing(skel->maps.samples));
    return obj;
  }
};

}  // namespace

const ProbeModule& module() {
  static const Module kModule;
  return kModule;
}

}  // namespace bpftrain::collector::loader::probes::tcp
