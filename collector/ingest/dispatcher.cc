#include "collector/ingest/dispatcher.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "common/metric_catalogue.h"

namespace bpftrain::collector::ingest {
namespace {

using window::kRejectedSeries;
using window::Label;
using window::SeriesId;
using window::SeriesKind;

SeriesKind kindOf(wire::SampleType t) {
  switch (t) {
    case wire::SampleType::kCounter:
      return SeriesKind::kCounter;
    case wire::SampleType::kTimer:
      return SeriesKind::kDistribution;
    case wire::SampleType::kGauge:
      break;
  }
  return SeriesKind::kGauge;
}

// A sequence that jumps back this far is a restarted sender, not a late frame.
constexpr uint32_t kRestartDistance = 1u << 16;

}  // namespace

Dispatcher::Dispatcher(window::SeriesStore& store, SenderRegistry& registry, IngestStats& stats,
                       int writer, DispatchOptions options)
    : store_(store),
      registry_(registry),
      stats_(stats),
      writer_(writer),
      options_(std::move(options)) {
  if (!options_.statsd_state)
    options_.statsd_state = std::make_shared<StatsdState>(store_.config());
}

void Dispatcher::tick(int64_t now_ns) {
  int64_t step = store_.stepOf(now_ns);
  if (step == last_tick_step_) return;
  last_tick_step_ = step;
  options_.statsd_state->refreshSets(store_, writer_, now_ns);
}

void Dispatcher::handleDatagram(std::span<const uint8_t> datagram, int64_t now_ns,
                                const SocketAddress* from) {
  IngestStats::bump(stats_.datagrams);
  IngestStats::bump(stats_.bytes, datagram.size());
  // The store expired idle series (--series-ttl): cached ids may name them, so look up again.
  if (const uint64_t epoch = store_.expiryEpoch(); epoch != expiry_epoch_) {
    expiry_epoch_ = epoch;
    for (auto& [sender, s] : senders_) {
      s.ids.fill(kUnset);
      s.topology_info.fill(kUnset);
      s.pinning_info.fill(kUnset);
    }
    statsd_.clear();
    labelled_.clear();
  }
  // The registry forgot senders that stopped (expireIdle): forget their cached state too, so
  // this table stays as small as the registry however many senders come and go.
  if (const uint64_t expiries = registry_.expiries(); expiries != sender_expiries_) {
    sender_expiries_ = expiries;
    std::string job, rank;
    std::erase_if(senders_, [&](const auto& e) { return !registry_.labelsOf(e.first, job, rank); });
  }
  if (datagram.size() >= 4 && wire::getU32(datagram.data()) == wire::kMagic) {
    from_ = from;
    handleBinary(datagram, now_ns);
    from_ = nullptr;
  } else {
    handleStatsd(std::string_view(reinterpret_cast<const char*>(datagram.data()), datagram.size()),
                 now_ns);
  }
}

// ---------------------------------------------------------------- binary frames

void Dispatcher::handleBinary(std::span<const uint8_t> datagram, int64_t now_ns) {
  while (!datagram.empty()) {
    wire::FrameView frame;
    wire::DecodeError e = wire::nextFrame(datagram, frame);
    if (e != wire::DecodeError::kNone) {
      // The length field cannot be trusted past a bad header: the rest of the datagram is lost.
      stats_.error(fromWire(e));
      return;
    }
    switch (frame.header.kind) {
      case wire::FrameKind::kHello:
        handleHello(frame, now_ns);
        break;
      case wire::FrameKind::kSamples:
        handleSamples(frame, now_ns);
        break;
      case wire::FrameKind::kWindowSummary:
        if (!options_.summary) {
          stats_.drop(DropReason::kUnexpectedKind);
        } else if (wire::DecodeError se = options_.summary(frame, store_, writer_, now_ns);
                   se != wire::DecodeError::kNone) {
          stats_.error(DecodeReason::kBadSummary);
        }
        break;
      case wire::FrameKind::kLabelledSamples:
        handleLabelled(frame, now_ns);
        break;
      case wire::FrameKind::kControl:
      case wire::FrameKind::kNcclControl:
        stats_.drop(DropReason::kUnexpectedKind);
        break;
    }
  }
}

void Dispatcher::handleHello(const wire::FrameView& frame, int64_t now_ns) {
  wire::HelloView hello;
  if (wire::DecodeError e = wire::decodeHello(frame, hello); e != wire::DecodeError::kNone) {
    stats_.error(fromWire(e));
    return;
  }
  if (!registry_.update(frame.header.sender_id, hello, now_ns, from_)) {
    stats_.drop(DropReason::kRegistryFull);
    return;
  }
  auto it = senders_.find(frame.header.sender_id);
  if (it != senders_.end()) {
    SenderState& s = it->second;
    char rank[16];
    auto [end, ec] = std::to_chars(rank, rank + sizeof rank, hello.rank);
    if (s.job != hello.job || s.rank != std::string_view(rank, end)) {
      // Same sender id, new identity: its cached series belong to the old labels.
      senders_.erase(it);
      return;
    }
    trackSequence(s, frame.header.sequence);
  }
}

Dispatcher::SenderState* Dispatcher::senderState(uint64_t sender_id) {
  auto it = senders_.find(sender_id);
  if (it != senders_.end()) return &it->second;
  std::string job, rank;
  if (!registry_.labelsOf(sender_id, job, rank)) return nullptr;
  SenderState& s = senders_[sender_id];
  s.job = std::move(job);
  s.rank = std::move(rank);
  s.ids.fill(kUnset);
  s.topology_info.fill(kUnset);
  s.pinning_info.fill(kUnset);
  return &s;
}

void Dispatcher::trackSequence(SenderState& s, uint32_t sequence) {
  if (s.sequence_valid) {
    uint32_t ahead = sequence - s.last_sequence;  // modulo 2^32: wraps like the sender's counter
    if (ahead == 0) return;                       // duplicate
    if (ahead > 0x80000000u) {
      // Behind: a reordered late frame (its gap was already counted) or a restarted sender.
      if (s.last_sequence - sequence < kRestartDistance) return;
    } else {
      IngestStats::bump(stats_.frames_lost, ahead - 1);
    }
  }
  s.last_sequence = sequence;
  s.sequence_valid = true;
}

SeriesId Dispatcher::seriesFor(SenderState& s, wire::MetricId metric) {
  SeriesId& id = s.ids[size_t(metric)];
  if (id != kUnset) return id;
  wire::MetricInfo info = wire::metricInfo(metric);
  Label labels[] = {{"job", s.job}, {"rank", s.rank}};
  SeriesId got = store_.lookup(info.name, labels, kindOf(info.type));
  if (got != kRejectedSeries) id = got;  // rejections are retried: the limit may be raised
  return got;
}

SeriesId Dispatcher::infoSeries(SenderState& s, std::string_view name, std::string_view label,
                                std::string_view value) {
  Label labels[] = {{"job", s.job}, {"rank", s.rank}, {label, value}};
  return store_.lookup(name, labels, SeriesKind::kGauge);
}

void Dispatcher::recordInfo(SenderState& s, bool topology, double value, int64_t now_ns) {
  int count = topology ? kTopologyCount : kPinModeCount;
  if (value < 0 || value >= count || value != std::floor(value)) return;  // gauge still recorded
  int v = int(value);
  int& current = topology ? s.topology : s.pinning;
  auto& ids = topology ? s.topology_info : s.pinning_info;
  auto idFor = [&](int which) {
    if (ids[which] == kUnset) {
      SeriesId got =
          topology ? infoSeries(s, metrics::kTopologyInfo.name, "topology",
                                topologyName(Topology(which)))
                   : infoSeries(s, metrics::kPinningInfo.name, "mode", pinModeName(PinMode(which)));
      if (got == kRejectedSeries) return got;
      ids[which] = got;
    }
    return ids[which];
  };
  if (current >= 0 && current != v) {
    if (SeriesId old = idFor(current); old != kRejectedSeries)
      store_.record(writer_, old, 0, now_ns);
  }
  if (SeriesId id = idFor(v); id != kRejectedSeries) store_.record(writer_, id, 1, now_ns);
  current = v;
}

void Dispatcher::handleSamples(const wire::FrameView& frame, int64_t now_ns) {
  wire::SamplesView samples;
  if (wire::DecodeError e = wire::decodeSamples(frame, samples); e != wire::DecodeError::kNone) {
    stats_.error(fromWire(e));
    return;
  }
  SenderState* s = senderState(frame.header.sender_id);
  if (s == nullptr) {
    stats_.drop(DropReason::kUnknownSender, samples.size());
    return;
  }
  trackSequence(*s, frame.header.sequence);
  uint64_t accepted = 0;
  for (size_t i = 0; i < samples.size(); ++i) {
    wire::SampleRecord r = samples[i];
    SeriesId id = seriesFor(*s, r.metric);
    if (id == kRejectedSeries) {
      stats_.drop(DropReason::kSeriesLimit);
      continue;
    }
    store_.record(writer_, id, r.value, now_ns);
    if (r.metric == wire::MetricId::kTopology) recordInfo(*s, true, r.value, now_ns);
    if (r.metric == wire::MetricId::kPinning) recordInfo(*s, false, r.value, now_ns);
    ++accepted;
  }
  stats_.sample(Protocol::kBinary, accepted);
}

// Labelled samples (plugins/nccl): the series is job, rank, then the catalogue's other labels
// with the values the record carries; cached per thread under those names and values.
void Dispatcher::handleLabelled(const wire::FrameView& frame, int64_t now_ns) {
  wire::LabelledSamplesView samples;
  if (wire::DecodeError e = wire::decodeLabelledSamples(frame, samples);
      e != wire::DecodeError::kNone) {
    stats_.error(fromWire(e));
    return;
  }
  SenderState* s = senderState(frame.header.sender_id);
  if (s == nullptr) {
    stats_.drop(DropReason::kUnknownSender, samples.count);
    return;
  }
  trackSequence(*s, frame.header.sequence);
  if (!s->nccl_marked) s->nccl_marked = registry_.markNccl(frame.header.sender_id);
  uint64_t accepted = 0;
  size_t offset = 0;
  std::array<char, 2 * wire::kMaxNameLength + 8 + wire::kMaxLabels*(wire::kMaxLabelValueLength + 1)>
      key_buf;
  for (size_t i = 0; i < samples.count; ++i) {
    const wire::LabelledRecord r = samples.next(offset);
    size_t at = 0;
    auto put = [&](std::string_view part) {
      key_buf[at++] = char(part.size());
      if (!part.empty()) std::memcpy(key_buf.data() + at, part.data(), part.size());
      at += part.size();
    };
    put(s->job);
    put(s->rank);
    key_buf[at++] = char(uint16_t(r.metric) & 0xff);
    key_buf[at++] = char(uint16_t(r.metric) >> 8);
    for (size_t l = 0; l < r.label_count; ++l) put(r.labels[l]);
    const std::string_view key(key_buf.data(), at);
    const uint64_t hash = hashKey(key);
    SeriesId id;
    if (const SeriesId* cached = labelled_.findHashed(key, hash)) {
      id = *cached;
    } else {
      const wire::LabelledMetricInfo info = wire::labelledMetricInfo(r.metric);
      Label labels[2 + wire::kMaxLabels] = {{"job", s->job}, {"rank", s->rank}};
      std::string_view names = info.labels;
      for (size_t l = 0; l < r.label_count; ++l) {
        const size_t space = names.find(' ');
        labels[2 + l] = Label{names.substr(0, space), r.labels[l]};
        names = space == std::string_view::npos ? std::string_view() : names.substr(space + 1);
      }
      id = store_.lookup(info.name, std::span<const Label>(labels, 2 + r.label_count),
                         kindOf(info.type));
      if (id == kRejectedSeries) {
        stats_.drop(DropReason::kSeriesLimit);
        continue;
      }
      if (labelled_.size() >= options_.max_cached_series) labelled_.clear();
      labelled_.insert(key, hash, id);
    }
    store_.record(writer_, id, r.value, now_ns);
    ++accepted;
  }
  stats_.sample(Protocol::kBinary, accepted);
}

// ---------------------------------------------------------------- StatsD lines

void Dispatcher::handleStatsd(std::string_view text, int64_t now_ns) {
  while (!text.empty()) {
    size_t nl = text.find('\n');  // memchr: one call per line over the whole datagram
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (line.empty() || line == "\r") continue;
    handleStatsdLine(line, now_ns);
  }
}

void Dispatcher::handleStatsdLine(std::string_view line, int64_t now_ns) {
  StatsdLine& l = line_;
  if (auto err = parseStatsdLine(line, l)) {
    stats_.error(*err);
    return;
  }
  if (l.ignored != IgnoredReason::kNone) {
    stats_.ignore(l.ignored);
    return;
  }
  // Series key: type, name field, tags and container as sent (value and rate excluded), built in
  // a fixed buffer.
  char* k = key_buf_.data();
  size_t key_len = 2 + l.key_name.size() + 1 + l.tags_raw.size() + 1 + l.container.size();
  if (key_len > key_buf_.size()) {
    stats_.error(DecodeReason::kOversized);
    return;
  }
  size_t at = 0;
  auto put = [&](std::string_view part) {
    if (part.empty()) return;  // an empty view may hold nullptr, which memcpy must not get
    std::memcpy(k + at, part.data(), part.size());
    at += part.size();
  };
  k[at++] = char('0' + int(l.type));
  k[at++] = '|';
  put(l.key_name);
  k[at++] = '|';
  put(l.tags_raw);
  k[at++] = '|';
  put(l.container);
  std::string_view key(k, key_len);

  uint64_t hash = hashKey(key);
  StatsdEntry* entry = statsd_.findHashed(key, hash);
  if (entry == nullptr) {
    // First sight of this series on this thread: map names (statsd_exporter rules) and look up.
    char name[kMaxStatsdNameLength + 8];
    size_t n = mapStatsdName(l.name, name, sizeof name);
    if (n == 0) {
      stats_.error(DecodeReason::kBadName);
      return;
    }
    std::string_view pname(name, n);
    // Counters are exported with a _total suffix; strip one sent by the client so it isn't doubled.
    if (l.type == StatsdType::kCounter && pname.size() > 6 && pname.ends_with("_total"))
      pname.remove_suffix(6);
    char tag_names[kMaxStatsdTags][kMaxStatsdNameLength + 8];
    Label labels[kMaxStatsdTags];
    for (size_t i = 0; i < l.tag_count; ++i) {
      size_t tn = mapStatsdName(l.tags[i].name, tag_names[i], sizeof tag_names[i]);
      std::string_view tname(tag_names[i], tn);
      if (tn == 0 || tname.starts_with("__")) {
        stats_.error(DecodeReason::kBadTag);
        return;
      }
      for (size_t j = 0; j < i; ++j) {
        if (labels[j].name == tname) {  // duplicate label names cannot form a series
          stats_.error(DecodeReason::kBadTag);
          return;
        }
      }
      labels[i] = Label{tname, l.tags[i].value};
    }
    // A set is exported as a gauge: its distinct members in the window.
    SeriesKind kind = l.type == StatsdType::kCounter ? SeriesKind::kCounter
                      : l.type == StatsdType::kGauge || l.type == StatsdType::kSet
                          ? SeriesKind::kGauge
                          : SeriesKind::kDistribution;
    SeriesId id = store_.lookup(pname, std::span<const Label>(labels, l.tag_count), kind);
    if (id == kRejectedSeries) {
      stats_.drop(DropReason::kSeriesLimit);
      return;
    }
    if (statsd_.size() >= options_.max_cached_series) statsd_.clear();
    StatsdEntry fresh{id};
    if (l.type == StatsdType::kGauge) fresh.gauge = &options_.statsd_state->gauge(id);
    if (l.type == StatsdType::kSet) fresh.set = &options_.statsd_state->set(id);
    entry = &statsd_.insert(key, hash, fresh);
  }
  if (l.valueless_tags > 0) stats_.ignore(IgnoredReason::kValuelessTag, l.valueless_tags);
  StatsdEntry& e = *entry;
  switch (l.type) {
    case StatsdType::kCounter:
      store_.record(writer_, e.id, l.value / l.sample_rate, now_ns);
      break;
    case StatsdType::kGauge:
      StatsdState::applyGauge(*e.gauge, store_, writer_, e.id, l.value, l.relative, now_ns);
      break;
    case StatsdType::kSet:
      if (!StatsdState::addMember(*e.set, store_, writer_, hashKey(l.set_value), now_ns)) {
        stats_.drop(DropReason::kSetLimit);
        return;
      }
      break;
    case StatsdType::kTimerMs:
    case StatsdType::kHistogram: {
      double v = l.type == StatsdType::kTimerMs ? l.value / 1000.0 : l.value;
      // statsd_exporter observes a sampled timer 1/rate times; bounded against amplification.
      int repeat = std::clamp(int(std::lround(1.0 / l.sample_rate)), 1, kMaxTimerRepeat);
      for (int i = 0; i < repeat; ++i) store_.record(writer_, e.id, v, now_ns);
      break;
    }
  }
  stats_.sample(Protocol::kStatsd);
}

}  // namespace bpftrain::collector::ingest
