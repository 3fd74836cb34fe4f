// tcp: the TCP transport of target processes. Counters for retransmits and samples taken; a ring
// buffer of per-socket samples (at most one per socket per sample interval, a rodata setting)
// that become the queued-bytes, in-flight-bytes, RTT and delivery-rate distributions, per rank and
// per link:
// `link` says whether the peer is on the same host or another one, `peer_node` which host. Its
// lost events: ring records it could not deliver, and sends on sockets whose owner storage the
// kernel could not allocate.
#include "bpf/tcp.h"

#include <array>
#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

#include "collector/loader/link_book.h"
#include "collector/loader/probe_module.h"
#include "tcp.skel.h"

namespace bpftrain::collector::loader::probes::tcp {
namespace {

class Object final : public RingProbeObject<tcp_sample, 1> {
 public:
  void onSample(const tcp_sample& sample) override {
    if (!sink().live(sample.slot)) return;
    const std::string_view own = sink().node(sample.slot);
    const LinkAddress src = LinkAddress::of(sample.family, sample.saddr);
    const LinkAddress dst = LinkAddress::of(sample.family, sample.daddr);
    book_.learn(src, own);
    const LinkBook::Peer peer = book_.classify(src, dst, own);
    std::array<window::SeriesId, 4>& ids = seriesFor(sample.slot, peer);
    // Queued bytes are what the application wrote and the peer has not acknowledged (SIOCOUTQ).
    // Bytes in flight alone fall when the receiver is slow (its window closes), so they are kept
    // as their own series.
    sink().record(ids[0], sample.send_queue);
    sink().record(ids[2], sample.bytes_in_flight);
    // The RTT and the delivery rate move only when the peer acknowledges this socket's data; a
    // socket that only receives (a ring's rank from its upstream neighbour) would repeat a value
    // from its last send, however old.
    if (sample.acked_since_last == 0) return;
    sink().record(ids[1], sample.srtt_us * 1e-6);
    // An application-limited sample says how fast the application wrote, not what the path
    // carries (a ring's rank waiting for its neighbour's chunk): only the others count. And only
    // a new one: the kernel keeps an older, faster sample over later small sends' (tcp.h), and
    // f28d and f29b read a clear phase's 36-38 Gbit/s, unchanged for 4 s, through a 2 Gbit/s
    // uplink throttle, so the controller saw no drop.
    if (sample.rate_is_new != 0 && sample.app_limited == 0 && sample.rate_interval_us > 0)
      sink().record(ids[3], double(sample.rate_delivered) * sample.mss * 1e6 /
                                double(sample.rate_interval_us));
  }

  void forgetSlot(uint32_t slot) override {
    for (auto it = links_.begin(); it != links_.end();)
      it = uint32_t(it->first >> 32) == slot ? links_.erase(it) : std::next(it);
  }

 private:
  // The series of one (slot, link); created on the link's first sample (allocation only then).
  std::array<window::SeriesId, 4>& seriesFor(uint32_t slot, const LinkBook::Peer& peer) {
    const uint64_t key = (uint64_t(slot) << 32) | peer.id;
    auto [it, created] = links_.try_emplace(key);
    if (created) {
      const window::Label labels[] = {
          {"transport", "tcp"}, {"link", linkClassName(peer.link)}, {"peer_node", peer.node}};
      it->second = {sink().series(slot, metrics::kTransportQueuedBytes, labels),
                    sink().series(slot, metrics::kTransportRttSeconds, labels),
                    sink().series(slot, metrics::kTransportInflightBytes, labels),
                    sink().series(slot, metrics::kTransportDeliveryRate, labels)};
    }
    return it->second;
  }

  LinkBook book_;
  std::unordered_map<uint64_t, std::array<window::SeriesId, 4>> links_;
};

const ProbeDef kProbes[] = {
    {"tcp",
     {"on_tcp_sendmsg", "on_tcp_probe", "on_tcp_retransmit"},
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
