// The rules policy's test harness: a policy driven step by step by synthetic job states, and a
// topology-aware signal model per link class from what the probes measured on netlab. Shared by
// the rules policy's test files (rules_policy_test.cc, rules_uplink_test.cc) and the bandit's
// tests of the same link signals (bandit_policy_test.cc).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "collector/controller/rules_policy.h"
#include "tests/collector/controller/synthetic.h"

namespace bpftrain::collector::controller::rules_harness {

using namespace testing;  // synthetic.h

inline constexpr int64_t kStepNs = 500'000'000;

struct Switch {
  double t;
  Arm to;
  std::string reason;
  std::string detail;
  int link;
};

// Drives the policy with one JobState per 500 ms step from `state(t, current arm)` (signals
// that depend on the topology running); decisions apply at once.
inline std::vector<Switch> runOnArm(Policy& p, double seconds,
                                    const std::function<JobState(double, const Arm&)>& state,
                                    Arm start = {}) {
  std::vector<Switch> out;
  Arm cur = start;
  FeatureExtractor ex("j");
  for (int64_t ns = 0; ns <= int64_t(seconds * 1e9); ns += kStepNs) {
    double t = double(ns) * 1e-9;
    JobState j = state(t, cur);
    j.topology = int(cur.topology);
    j.pinning = int(cur.pinning);
    Decision d = p.decide(ex.update(snapshotsOf(j), ns), cur, ns);
    if (d.change) {
      out.push_back({t, d.to, std::string(d.reason), d.detail, d.link});
      cur = d.to;
    }
  }
  return out;
}

// The same for signals that do not depend on the topology.
inline std::vector<Switch> run(RulesPolicy& p, double seconds,
                               const std::function<JobState(double)>& state, Arm start = {}) {
  return runOnArm(
      p, seconds, [&](double t, const Arm&) { return state(t); }, start);
}

// Levels as the TCP probes measured them on netlab (see RulesConfig).
inline JobState clear() {
  JobState j;
  j.queued_bytes_p99 = 6e6;
  j.rtt_p50 = 1.3e-3;
  j.rtt_p99 = 6.5e-3;
  return j;
}
inline JobState congested() {
  JobState j;
  j.samples_per_s_per_rank = 300;  // congestion costs throughput (500 clear)
  j.queued_bytes_p99 = 7.8e6;
  j.rtt_p50 = 9e-3;
  j.rtt_p99 = 33e-3;
  return j;
}
inline JobState severe() {
  JobState j = congested();
  j.queued_bytes_p99 = 80e6;
  return j;
}

// A topology-aware signal model per link class, from the levels the tcp probe measured on netlab
// (RulesConfig): hierarchical's leaders keep the inter-host RTT median at 2-7 ms whether or not
// anything is congested (above the thresholds), and its same-host stage runs through shared
// memory (no same-host gradient traffic: the class is absent here; in reality its few control
// messages show 6-18 ms). kUplinkCongested is an uplink throttled hard enough for the ring's
// inter-host RTT to show it. kUplinkHidden is the 2 Gbit/s uplink as measured: the ring's
// inter-host RTT median only 1.6-2.6 ms (under every threshold) while its allreduce share of the
// step rose from 53-58% to 67-71% and hierarchical ran faster. With `delivery`, the links also
// carry delivery-rate samples (without, every sample was application-limited): what BBR's
// short queues leave visible of the uplink, the other_host median from ~10 to ~1.8 Gbit/s on
// either topology (netlab, `ss -ti`).
enum class Phase { kClear, kIntraHostCongested, kUplinkCongested, kUplinkHidden };
inline JobState linkModel(Phase phase, const Arm& arm, bool delivery = false) {
  JobState j;
  const bool ring = arm.topology == Topology::kRing;
  // Throughput per rank: the ring fastest when clear, hierarchical unaffected by same-host
  // congestion and less hurt by uplink congestion (netlab's orders of magnitude).
  const bool uplink = phase == Phase::kUplinkCongested || phase == Phase::kUplinkHidden;
  if (ring)
    j.samples_per_s_per_rank = phase == Phase::kClear ? 500 : uplink ? 250 : 150;
  else
    j.samples_per_s_per_rank = uplink ? 350 : 400;
  // The allreduce's share of the step: 0.5 clear, up when the uplink slows the exchange.
  j.step_s = 0.2;
  j.allreduce_s = phase == Phase::kUplinkHidden ? (ring ? 0.14 : 0.12) : 0.1;
  if (ring) {
    j.same_host = {phase == Phase::kIntraHostCongested ? 9e-3 : 0.2e-3,
                   phase == Phase::kIntraHostCongested ? 33e-3 : 1.5e-3, 6e6};
    j.other_host = {phase == Phase::kUplinkCongested ? 9e-3
                    : phase == Phase::kUplinkHidden  ? 2.2e-3
                                                     : 1.3e-3,
                    phase == Phase::kUplinkCongested ? 33e-3 : 6.5e-3, 6e6};
  } else {
    j.other_host = {phase == Phase::kUplinkCongested ? 9e-3 : 6e-3,
                    phase == Phase::kUplinkCongested ? 30e-3 : 14e-3, 7e6};
  }
  if (delivery) {
    j.other_host.delivery = uplink ? 1.8e9 / 8 : 10e9 / 8;
    if (ring) j.same_host.delivery = phase == Phase::kIntraHostCongested ? 0.5e9 / 8 : 20e9 / 8;
  }
  return j;
}

inline std::vector<Switch> runPhases(RulesPolicy& p, double seconds,
                                     const std::function<Phase(double)>& phase) {
  return runOnArm(p, seconds, [&](double t, const Arm& a) { return linkModel(phase(t), a); });
}

}  // namespace bpftrain::collector::controller::rules_harness
