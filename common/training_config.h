// The two knobs the controller turns and the trainer applies. Their numeric values travel in
// control frames and telemetry: append, never renumber.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace bpftrain {

enum class Topology : uint8_t { kRing = 0, kHalvingDoubling = 1, kBcube = 2, kHierarchical = 3 };
inline constexpr int kTopologyCount = 4;

enum class PinMode : uint8_t { kNone = 0, kCompact = 1, kSpread = 2, kNuma = 3 };
inline constexpr int kPinModeCount = 4;

inline constexpr std::string_view topologyName(Topology t) {
  switch (t) {
    case Topology::kRing: return "ring";
    case Topology::kHalvingDoubling: return "halving-doubling";
    case Topology::kBcube: return "bcube";
    case Topology::kHierarchical: return "hierarchical";
  }
  return "unknown";
}

inline constexpr std::string_view pinModeName(PinMode p) {
  switch (p) {
    case PinMode::kNone: return "none";
    case PinMode::kCompact: return "compact";
    case PinMode::kSpread: return "spread";
    case PinMode::kNuma: return "numa";
  }
  return "unknown";
}

inline std::optional<Topology> parseTopology(std::string_view s) {
  for (int i = 0; i < kTopologyCount; ++i)
    if (topologyName(Topology(i)) == s) return Topology(i);
  return std::nullopt;
}

inline std::optional<PinMode> parsePinMode(std::string_view s) {
  for (int i = 0; i < kPinModeCount; ++i)
    if (pinModeName(PinMode(i)) == s) return PinMode(i);
  return std::nullopt;
}

}  // namespace bpftrain
