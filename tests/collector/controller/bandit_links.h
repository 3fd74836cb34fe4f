// Helpers for the bandit's tests of the per-link signals: features of a job with its same-host
// links' RTT median, and a run of the bandit on them (shared by bandit_policy_test.cc and
// bandit_trial_test.cc).
#pragma once

#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "collector/controller/bandit_policy.h"
#include "tests/collector/controller/synthetic.h"

namespace bpftrain::collector::controller::bandit_links {

using namespace testing;  // synthetic.h

inline constexpr int64_t kStepNs = 500'000'000;

// Features of a ring/hierarchical/halving-doubling job with its same-host links' RTT median.
inline Features linkFeatures(Topology t, double latest, double window, double same_host_rtt_s) {
  Features f;
  f.job = "j";
  f.has_steps = f.has_transport = f.has_links = true;
  f.ranks = 4;
  f.topology = t;
  f.pinning = PinMode::kNone;
  f.step_p50_s = f.step_p99_s = 0.4;
  f.allreduce_share = 0.5;
  f.samples_per_s = latest;
  f.samples_per_s_window = window;
  LinkSignals& sh = f.links[int(Link::kSameHost)];
  sh.seen = true;
  sh.samples = 500;
  sh.rtt_p50_s = same_host_rtt_s;
  sh.rtt_p99_s = same_host_rtt_s * 2;
  sh.rtt_jitter_s = 0.01;
  return f;
}

// Start-up on clear links: the untried arms once each, then the ring (200 samples/s, the
// others 150) until nothing moves for 30 steps; `ns` advances with the steps.
inline void settleOnTheRing(BanditPolicy& p, int64_t& ns) {
  Arm cur{};
  int quiet = 0;
  for (int i = 0; i < 200 && quiet < 30; ++i, ns += kStepNs) {
    const double sps = cur.topology == Topology::kRing ? 200 : 150;
    Decision d = p.decide(linkFeatures(cur.topology, sps, sps, 1.5e-3), cur, ns);
    quiet = d.change ? 0 : quiet + 1;
    if (d.change) cur = d.to;
  }
  ASSERT_EQ(cur.topology, Topology::kRing);
}

// Drives the bandit with linkFeatures() from `sps(topology, step)` and the same-host RTT median
// `rtt(topology, step)` a flat topology's links read (and the training step time, when given);
// prints the decisions and returns them with the topology run at each step.
struct LinkRun {
  std::vector<Topology> on;
  std::vector<std::pair<int, Decision>> decisions;
};
inline LinkRun runLinks(BanditPolicy& p, Arm cur, int steps,
                        const std::function<double(Topology, int)>& sps,
                        const std::function<double(Topology, int)>& rtt,
                        const std::function<double(Topology, int)>& step_s = nullptr) {
  LinkRun out;
  for (int i = 0; i < steps; ++i) {
    out.on.push_back(cur.topology);
    const double v = sps(cur.topology, i);
    Features f = linkFeatures(cur.topology, v, v, rtt(cur.topology, i));
    if (step_s) f.step_p50_s = f.step_p99_s = step_s(cur.topology, i);
    Decision d = p.decide(f, cur, i * kStepNs);
    if (!d.change) continue;
    std::printf("%d: %s (%s: %s)\n", i, armName(d.to).c_str(), std::string(d.reason).c_str(),
                d.detail.c_str());
    out.decisions.emplace_back(i, d);
    cur = d.to;
  }
  return out;
}

}  // namespace bpftrain::collector::controller::bandit_links
