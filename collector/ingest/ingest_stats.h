// Ingest self-metrics. Each ingest thread owns one IngestStats and is its only writer, so the hot
// path bumps relaxed atomics without contention; the exporter sums all threads on scrape.
#pragma once

#include <atomic>
#include <cstdint>
#include <string_view>

#include "common/enum_names.h"
#include "common/wire_format.h"

namespace bpftrain::collector::ingest {

// Why a datagram, frame or line was rejected: the `reason` label of
// bpftrain_collector_decode_errors_total. The wire format's reasons first, then the collector's.
enum class DecodeReason : uint8_t {
  kNone = 0,
  BPFTRAIN_WIRE_DECODE_ERRORS(BPFTRAIN_ENUMERATOR)
  // StatsD lines
  kBadLine,        // no ':' or '|' where the syntax needs one
  kBadValue,       // value is not a number (or a negative counter)
  kBadType,        // type other than c, g, ms, h, d
  kBadSampleRate,  // @rate not in (0, 1]
  kBadTag,         // tag without a value, or a bad tag name
  kLabelFlood,     // more tags than the bound, or a tag value over the length bound
  kMixedTags,      // tags in the name (Librato, InfluxDB, SignalFX) and |# tags on one line
  kBadSummary,     // window-summary frame the upstream decoder rejected
  kCount,
};
// Both enums are built from one list, so a cast maps one onto the other.
static_assert(uint8_t(DecodeReason::kBadLine) == uint8_t(wire::DecodeError::kCount));
inline DecodeReason fromWire(wire::DecodeError e) { return DecodeReason(uint8_t(e)); }

// The StatsD and summary reasons; the mirrored ones are named by wire::kDecodeErrorNames.
inline constexpr auto kIngestDecodeReasonNames = enumNames<DecodeReason>({
    {DecodeReason::kBadLine, "statsd_syntax"},
    {DecodeReason::kBadValue, "bad_value"},
    {DecodeReason::kBadType, "bad_type"},
    {DecodeReason::kBadSampleRate, "bad_sample_rate"},
    {DecodeReason::kBadTag, "bad_tag"},
    {DecodeReason::kLabelFlood, "label_flood"},
    {DecodeReason::kMixedTags, "mixed_tag_styles"},
    {DecodeReason::kBadSummary, "bad_summary"},
});
static_assert(kIngestDecodeReasonNames.size() ==
              size_t(DecodeReason::kCount) - size_t(DecodeReason::kBadLine));

constexpr std::string_view decodeReasonName(DecodeReason r) {
  if (r < DecodeReason::kBadLine) return wire::decodeErrorName(wire::DecodeError(uint8_t(r)));
  return kIngestDecodeReasonNames.name(r);
}

// Samples that decoded fine but were not stored: the `reason` label of dropped_total.
enum class DropReason : uint8_t {
  kUnknownSender,   // samples from a sender that has not said hello (yet)
  kSeriesLimit,     // the store refused a new series (max_series)
  kRegistryFull,    // hello from one sender too many
  kUnexpectedKind,  // control frames (sent to the trainer, not here) or summaries w/o upstream
  kSetLimit,        // a StatsD set member beyond kMaxSetMembers live members of one set
  kCount,
};

inline constexpr auto kDropReasonNames = enumNames<DropReason>({
    {DropReason::kUnknownSender, "unknown_sender"},
    {DropReason::kSeriesLimit, "series_limit"},
    {DropReason::kRegistryFull, "registry_full"},
    {DropReason::kUnexpectedKind, "unexpected_kind"},
    {DropReason::kSetLimit, "set_limit"},
});
static_assert(kDropReasonNames.size() == size_t(DropReason::kCount));
constexpr std::string_view dropReasonName(DropReason r) { return kDropReasonNames.name(r); }

// StatsD input that is understood and deliberately not stored: the `reason` label of
// bpftrain_collector_statsd_ignored_total. Never a decode error: clients send these routinely.
enum class IgnoredReason : uint8_t {
  kNone = 0,
  kEvent,         // DogStatsD event line "_e{...}"
  kServiceCheck,  // DogStatsD service check line "_sc|..."
  kValuelessTag,  // one tag without a value ("|#canary"): the line is stored without it
  kCount,
};

inline constexpr auto kIgnoredReasonNames = enumNames<IgnoredReason>({
    {IgnoredReason::kEvent, "event"},
    {IgnoredReason::kServiceCheck, "service_check"},
    {IgnoredReason::kValuelessTag, "valueless_tag"},
});
static_assert(kIgnoredReasonNames.size() == size_t(IgnoredReason::kCount) - 1);
constexpr std::string_view ignoredReasonName(IgnoredReason r) {
  return kIgnoredReasonNames.name(r);
}

enum class Protocol : uint8_t { kBinary, kStatsd, kCount };
inline constexpr auto kProtocolNames =
    enumNames<Protocol>({{Protocol::kBinary, "binary"}, {Protocol::kStatsd, "statsd"}});
static_assert(kProtocolNames.size() == size_t(Protocol::kCount));
constexpr std::string_view protocolName(Protocol p) { return kProtocolNames.name(p); }

struct alignas(64) IngestStats {
  std::atomic<uint64_t> samples[size_t(Protocol::kCount)]{};
  std::atomic<uint64_t> decode_errors[size_t(DecodeReason::kCount)]{};
  std::atomic<uint64_t> dropped[size_t(DropReason::kCount)]{};
  std::atomic<uint64_t> ignored[size_t(IgnoredReason::kCount)]{};
  std::atomic<uint64_t> frames_lost{};   // frames missing in per-sender sequences
  std::atomic<uint64_t> kernel_drops{};  // SO_RXQ_OVFL: datagrams the socket buffer refused
  std::atomic<uint64_t> datagrams{};
  std::atomic<uint64_t> bytes{};

  // Single writer per instance: a plain load+store is enough and cheaper than fetch_add.
  static void bump(std::atomic<uint64_t>& c, uint64_t n = 1) {
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  }
  void sample(Protocol p, uint64_t n = 1) { bump(samples[size_t(p)], n); }
  void error(DecodeReason r) { bump(decode_errors[size_t(r)]); }
  void drop(DropReason r, uint64_t n = 1) { bump(dropped[size_t(r)], n); }
  void ignore(IgnoredReason r, uint64_t n = 1) { bump(ignored[size_t(r)], n); }
};

}  // namespace bpftrain::collector::ingest
