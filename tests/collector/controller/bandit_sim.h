// The bandit policy's simulator: a job whose training steps take as long as the running topology
// and the phase make them, fed to the policy every 500 ms as ControllerService feeds it, through
// the netlab scenarios (four- and five-phase) at the steps/s the bench and the controller
// measured. It judges the policy per phase against the best static configuration, which the
// step-by-step unit tests cannot; kept in a header so that more than one test file can run it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <optional>
#include <random>
#include <utility>
#include <vector>

#include "collector/controller/bandit_policy.h"
#include "tests/collector/controller/synthetic.h"

namespace bpftrain::collector::controller::bandit_sim {

using namespace testing;  // synthetic.h

// A topology-aware job in time: training steps run back to back, each as long as its
// topology and the phase make it (with +-noise); a decision is applied at the next step boundary
// and that first step pays a switch cost; the controller is fed every 500 ms only while no
// decision is in flight (as ControllerService does), and reads what the trainer reports:
// samples/s of the last step, or of the step in progress once it ran longer (Emitter), the
// window's step median, and per-link RTT medians that depend on the topology that ran through
// the 1 s window (the ring shows a throttled link; hierarchical's same-host sockets carry
// control messages at 6-18 ms whatever the links do).
struct SimPhase {
  double until_s;
  std::map<Topology, double> steps_per_s;
  double ring_same_host_rtt_s = 0.002, ring_other_host_rtt_s = 0.0015;
};

struct SimResult {
  std::vector<double> steps_in_phase;  // training steps completed, per phase (after settle)
  std::vector<double> seconds_in_phase;
  std::vector<std::pair<double, Decision>> decisions;
  std::map<Topology, double> seconds_on;  // training time per topology, whole run
};

inline SimResult simulate(BanditPolicy& p, const std::vector<SimPhase>& phases, uint32_t seed,
                          double noise = 0.08, double settle_s = 3) {
  constexpr double kBatch = 128, kWindowS = 0.5, kSwitchS = 0.1;
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-noise, noise);
  auto phaseAt = [&](double t) {
    size_t i = 0;
    while (i + 1 < phases.size() && t >= phases[i].until_s) ++i;
    return i;
  };
  SimResult r;
  r.steps_in_phase.assign(phases.size(), 0);
  r.seconds_in_phase.assign(phases.size(), 0);
  for (size_t i = 0; i < phases.size(); ++i)
    r.seconds_in_phase[i] = phases[i].until_s - (i ? phases[i - 1].until_s : 0) - settle_s;
  Arm running{Topology::kRing, PinMode::kNone};
  std::optional<Arm> pending;
  double step_start = 0, step_len = 0, last_len = 0, arm_since = 0;
  Topology prev_topology = running.topology;
  bool first = true;
  std::vector<std::pair<double, double>> done;  // (end time, duration)
  auto startStep = [&](double t) {
    bool switched = false;
    if (pending) {
      if (pending->topology != running.topology) {
        prev_topology = running.topology;
        arm_since = t;
      }
      running = *pending;
      pending.reset();
      switched = true;
    }
    // One step's work at the rate of each phase it runs through (a throttle set mid-step slows
    // the rest of it), times the step's noise.
    step_start = t;
    double at = t, left = 1;
    for (size_t i = phaseAt(t);; ++i) {
      const double rate = phases[i].steps_per_s.at(running.topology);
      if (i + 1 == phases.size() || at + left / rate <= phases[i].until_s) {
        at += left / rate;
        break;
      }
      left -= rate * (phases[i].until_s - at);
      at = phases[i].until_s;
    }
    step_len = (at - t) * (1 + u(rng)) + (switched ? kSwitchS : 0);
  };
  startStep(0);
  FeatureExtractor ex("j");
  const double end = phases.back().until_s;
  for (int64_t tick = 1; double(tick) * kWindowS <= end; ++tick) {
    const double now = double(tick) * kWindowS;
    while (step_start + step_len <= now) {
      const double t_end = step_start + step_len;
      size_t ph = phaseAt(step_start);
      double ph_start = ph ? phases[ph - 1].until_s : 0;
      if (step_start >= ph_start + settle_s) r.steps_in_phase[ph] += 1;
      r.seconds_on[running.topology] += step_len;
      done.push_back({t_end, step_len});
      last_len = step_len;
      first = false;
      startStep(t_end);
    }
    if (pending || first) continue;  // a decision in flight: the service waits
    std::vector<double> window;
    for (const auto& [t_end, len] : done)
      if (t_end > now - 2 * kWindowS) window.push_back(len);
    if (window.empty()) continue;  // no step in the window: no features
    std::sort(window.begin(), window.end());
    JobState j;
    j.ranks = 1;
    j.step_s = window[window.size() / 2];
    j.topology = int(running.topology);
    const double in_progress = now - step_start;
    j.samples_per_s_per_rank = kBatch / std::max(last_len, in_progress);
    // The links the window saw: the previous topology's until this one ran a whole window.
    const Topology shown = now - arm_since >= 2 * kWindowS ? running.topology : prev_topology;
    const SimPhase& ph = phases[phaseAt(now)];
    j.same_host.rtt_p50 = shown == Topology::kHierarchical ? 0.008 : ph.ring_same_host_rtt_s;
    j.other_host.rtt_p50 = shown == Topology::kHierarchical ? 0.003 : ph.ring_other_host_rtt_s;
    const int64_t ns = int64_t(now * 1e9);
    Decision d = p.decide(ex.update(snapshotsOf(j), ns), running, ns);
    if (d.change) {
      r.decisions.push_back({now, d});
      pending = d.to;
    }
  }
  return r;
}

// tools/netlab.d/four-phase.json as the bench measured it (steps/s of the static
// configurations; halving-doubling from probe-phases.json's ratios): 25 s each of clear links,
// lo throttled in both hosts (the ring's same-host RTT 9-24 ms), clear again, host1's uplink at
// 2 Gbit/s (RTT does not show it).
inline std::vector<SimPhase> fourPhase() {
  using T = Topology;
  return {
      {25, {{T::kRing, 3.04}, {T::kHierarchical, 2.54}, {T::kHalvingDoubling, 2.8}}},
      {50, {{T::kRing, 0.76}, {T::kHierarchical, 2.52}, {T::kHalvingDoubling, 0.9}}, 0.012, 0.0015},
      {75, {{T::kRing, 3.13}, {T::kHierarchical, 2.75}, {T::kHalvingDoubling, 2.9}}},
      {100,
       {{T::kRing, 1.90}, {T::kHierarchical, 1.95}, {T::kHalvingDoubling, 2.2}},
       0.002,
       0.0025},
  };
}

// Per phase: steps/s the policy achieved / the best static configuration's.
inline std::vector<double> vsBestStatic(const SimResult& r, const std::vector<SimPhase>& phases) {
  std::vector<double> out;
  for (size_t i = 0; i < phases.size(); ++i) {
    double best = 0;
    for (const auto& [t, sps] : phases[i].steps_per_s) best = std::max(best, sps);
    out.push_back(r.steps_in_phase[i] / r.seconds_in_phase[i] / best);
  }
  return out;
}

// tools/netlab.d/five-phase.json: the four phases and clear again after the uplink.
inline std::vector<SimPhase> fivePhase() {
  std::vector<SimPhase> p = fourPhase();
  p.push_back(p[0]);
  p.back().until_s = 125;
  return p;
}

// tools/netlab.d/five-phase.json as the controller read it in f28c's adaptive runs (2026-12-05,
// samples/s of 128-sample steps over 4 ranks, the 1 s window): the ring 540 clear, 97 with lo
// throttled (static run), 290 through host1's throttled uplink; hierarchical 410-430 clear and
// throttled, 340 through the uplink (the best there: its leaders cross it once per step);
// halving-doubling 490-515 clear, 310-330 through the uplink. The uplink's lift shows on
// hierarchical only as its samples/s rising 1.2x, on no link signal.
inline std::vector<SimPhase> fivePhaseAsMeasured() {
  using T = Topology;
  const SimPhase clear{25, {{T::kRing, 4.22}, {T::kHierarchical, 3.3}, {T::kHalvingDoubling, 3.9}}};
  std::vector<SimPhase> p = {clear, clear, clear, clear, clear};
  p[1] = {50, {{T::kRing, 0.76}, {T::kHierarchical, 3.3}, {T::kHalvingDoubling, 1.0}}, 0.012};
  p[2].until_s = 75;
  p[3] = {100, {{T::kRing, 2.27}, {T::kHierarchical, 2.66}, {T::kHalvingDoubling, 2.5}}};
  p[4].until_s = 125;
  return p;
}

}  // namespace bpftrain::collector::controller::bandit_sim
