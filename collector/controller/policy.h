// Policies turn a stream of Features (one per window step) into decisions. They are plain
// classes with no I/O: the ControllerService feeds them and acts on what they return, and the
// unit tests feed them synthetic streams.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "collector/controller/features.h"
#include "common/training_config.h"

namespace bpftrain::collector::controller {

struct Arm {
  Topology topology = Topology::kRing;
  PinMode pinning = PinMode::kNone;
  friend bool operator==(const Arm&, const Arm&) = default;
};

std::string armName(const Arm& a);  // "ring/none"

struct Decision {
  bool change = false;  // false: keep the current configuration
  Arm to;
  // A short label from a fixed set (the `reason` label of decisions_total) and a sentence for
  // the decisions log.
  std::string_view reason = "";
  std::string detail;
  // The link class whose congestion the move answers (a Link; RulesPolicy::kRdmaLink for RDMA),
  // -1 for a move on anything else: the diagnosis names that link at once (Diagnoser::decided).
  int link = -1;
};

class Policy {
 public:
  virtual ~Policy() = default;
  virtual std::string_view name() const = 0;
  // Called once per window step with the job's features. `current` is the configuration the
  // trainer runs (the service fills it from the features, or from its last applied decision).
  virtual Decision decide(const Features& features, const Arm& current, int64_t now_ns) = 0;
  // Called between window steps (every --controller-period) with fresh features: only a move
  // that cannot wait for the next step, since a decision that misses the trainer's step boundary
  // waits a whole training step. Nothing decide() counts per step may advance here (consecutive
  // steps, smoothed levels): decide() alone sees the step stream. The default waits for decide().
  virtual Decision react(const Features&, const Arm& current, int64_t) {
    Decision d;
    d.to = current;
    return d;
  }
};

// "rules" or "bandit"; nullptr for an unknown name.
std::unique_ptr<Policy> makePolicy(std::string_view name);

}  // namespace bpftrain::collector::controller
