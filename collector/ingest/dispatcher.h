// Turns datagrams into series samples. One Dispatcher per ingest thread (it is not thread-safe):
// its caches map (sender, metric) and StatsD (name, type, tags) to SeriesIds so that, once warm,
// a sample costs a hash lookup and a store record(), with no string work and no allocation.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>

#include "collector/ingest/ingest_stats.h"
#include "collector/ingest/key_table.h"
#include "collector/ingest/sender_registry.h"
#include "collector/ingest/statsd.h"
#include "collector/ingest/statsd_state.h"
#include "collector/window/series_store.h"
#include "common/training_config.h"
#include "common/wire_format.h"

namespace bpftrain::collector::ingest {

// Merges a child collector's kWindowSummary frame into the store (collector/upstream).
using SummaryHandler =
    std::function<wire::DecodeError(const wire::FrameView&, window::SeriesStore&, int, int64_t)>;

struct DispatchOptions {
  SummaryHandler summary;              // empty: summary frames are dropped (unexpected_kind)
  size_t max_cached_series = 1 << 20;  // per-thread StatsD key cache; cleared when exceeded
  // Gauge values and set members shared by every ingest thread (UdpIngest makes one); empty:
  // this dispatcher keeps its own.
  std::shared_ptr<StatsdState> statsd_state;
};

class Dispatcher {
 public:
  Dispatcher(window::SeriesStore& store, SenderRegistry& registry, IngestStats& stats, int writer,
             DispatchOptions options = {});

  // One datagram: binary frames when it starts with the wire magic, StatsD lines otherwise.
  // `from` (may be null) is where it came from; hellos record it in the registry.
  void handleDatagram(std::span<const uint8_t> datagram, int64_t now_ns,
                      const SocketAddress* from = nullptr);

  size_t cachedSenders() const { return senders_.size(); }

  // Once per loop of one ingest thread: at each new window step, records every StatsD set's
  // distinct count, so that members leaving the window lower the gauge without new traffic.
  void tick(int64_t now_ns);

 private:
  static constexpr size_t kMetricSlots = size_t(wire::MetricId::kLast) + 1;
  static constexpr window::SeriesId kUnset = window::kRejectedSeries - 1;

  struct SenderState {
    std::string job;
    std::string rank;
    std::array<window::SeriesId, kMetricSlots> ids;
    std::array<window::SeriesId, kTopologyCount> topology_info;
    std::array<window::SeriesId, kPinModeCount> pinning_info;
    int topology = -1;  // current value, for the *_info series
    int pinning = -1;
    uint32_t last_sequence = 0;
    bool sequence_valid = false;
    bool nccl_marked = false;  // the registry knows it sends labelled samples
  };

  struct StatsdEntry {
    window::SeriesId id = window::kRejectedSeries;
    StatsdState::GaugeCell* gauge = nullptr;  // gauges: the shared value deltas apply to
    StatsdState::SetCell* set = nullptr;      // sets: the shared members
  };

  void handleBinary(std::span<const uint8_t> datagram, int64_t now_ns);
  void handleHello(const wire::FrameView& frame, int64_t now_ns);
  void handleSamples(const wire::FrameView& frame, int64_t now_ns);
  void handleLabelled(const wire::FrameView& frame, int64_t now_ns);  // the NCCL plugin's
  void trackSequence(SenderState& s, uint32_t sequence);
  SenderState* senderState(uint64_t sender_id);
  window::SeriesId seriesFor(SenderState& s, wire::MetricId metric);
  void recordInfo(SenderState& s, bool topology, double value, int64_t now_ns);
  window::SeriesId infoSeries(SenderState& s, std::string_view name, std::string_view label,
                              std::string_view value);

  void handleStatsd(std::string_view text, int64_t now_ns);
  void handleStatsdLine(std::string_view line, int64_t now_ns);

  window::SeriesStore& store_;
  SenderRegistry& registry_;
  IngestStats& stats_;
  int writer_;
  DispatchOptions options_;
  std::unordered_map<uint64_t, SenderState> senders_;
  uint64_t sender_expiries_ = 0;  // registry_.expiries() when senders_ was last pruned
  KeyTable<StatsdEntry> statsd_;
  KeyTable<window::SeriesId> labelled_;  // "job|rank|metric|label values" of labelled samples
  int64_t last_tick_step_ = 0;
  const SocketAddress* from_ = nullptr;  // the source of the datagram being handled
  StatsdLine line_;                      // reused parse output
  uint64_t expiry_epoch_ = 0;  // the store's expiryEpoch() the cached ids were looked up under
  std::array<char, 2 * kMaxStatsdNameLength +
                       kMaxStatsdTags*(kMaxStatsdNameLength + kMaxStatsdTagValueLength + 2) +
                       kMaxStatsdTagValueLength + 8>
      key_buf_;
};

}  // namespace bpftrain::collector::ingest
