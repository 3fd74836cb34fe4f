// What the controller does with a decision: act (sign and send it to the trainer) or advise (only
// log it). A header of its own so that the collector's config validates --control-mode without
// the controller library.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "common/enum_names.h"

namespace bpftrain::collector::controller {

enum class ControlMode : uint8_t { kAct, kAdvise };
inline constexpr auto kControlModeNames =
    enumNames<ControlMode>({{ControlMode::kAct, "act"}, {ControlMode::kAdvise, "advise"}});

constexpr std::optional<ControlMode> parseControlMode(std::string_view s) {
  return kControlModeNames.parse(s);
}
constexpr std::string_view controlModeName(ControlMode m) { return kControlModeNames.name(m); }

}  // namespace bpftrain::collector::controller
