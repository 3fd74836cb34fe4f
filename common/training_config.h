// The two knobs the controller turns and the trainer applies. Their numeric values travel in
// control frames and telemetry: append, never renumber.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/enum_names.h"

namespace bpftrain {

enum class Topology : uint8_t { kRing = 0, kHalvingDoubling = 1, kBcube = 2, kHierarchical = 3 };
inline constexpr int kTopologyCount = 4;

enum class PinMode : uint8_t { kNone = 0, kCompact = 1, kSpread = 2, kNuma = 3 };
inline constexpr int kPinModeCount = 4;

inline constexpr auto kTopologyNames = enumNames<Topology>({
    {Topology::kRing, "ring"},
    {Topology::kHalvingDoubling, "halving-doubling"},
    {Topology::kBcube, "bcube"},
    {Topology::kHierarchical, "hierarchical"},
});
static_assert(kTopologyNames.size() == kTopologyCount);

inline constexpr auto kPinModeNames = enumNames<PinMode>({
    {PinMode::kNone, "none"},
    {PinMode::kCompact, "compact"},
    {PinMode::kSpread, "spread"},
    {PinMode::kNuma, "numa"},
});
static_assert(kPinModeNames.size() == kPinModeCount);

inline constexpr std::string_view topologyName(Topology t) { return kTopologyNames.name(t); }
inline constexpr std::string_view pinModeName(PinMode p) { return kPinModeNames.name(p); }
inline constexpr std::optional<Topology> parseTopology(std::string_view s) {
  return kTopologyNames.parse(s);
}
inline constexpr std::optional<PinMode> parsePinMode(std::string_view s) {
  return kPinModeNames.parse(s);
}

}  // namespace bpftrain
