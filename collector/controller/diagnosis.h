// What is slow in a job and why, from the features the controller already has: one cause at a
// time, checked in order of how much of a step it can cost. Pure: the same features give the
// same diagnosis, so it is tested on hand-made streams like the policies.
//
// Link congestion is judged directly only while the job runs a flat topology (the ring,
// halving-doubling, bcube: linksObservable()), where every link class carries the gradient in
// large chunks. On hierarchical a link's signals reflect the topology's own pattern (its leaders
// move large chunks across hosts; its same-host sockets carry only small control messages), so
// the last link diagnosis made on a flat topology is carried over, marked so, until one runs
// again or a direct reading (the ring probe, a rise) ends it.
#pragma once

#include <string>
#include <string_view>

#include "collector/controller/features.h"
#include "collector/controller/ring_probe_judge.h"
#include "collector/controller/rules_policy.h"
#include "collector/controller/throughput_rise.h"

namespace bpftrain::collector::controller {

struct DiagnosisConfig {
  // Link congestion and memory placement: the rules policy's thresholds, so
  // that what is diagnosed and what the policy acts on cannot drift apart.
  double same_host_rtt_p50_s = RulesConfig{}.same_host_rtt_p50_high_s;
  double other_host_rtt_p50_s = RulesConfig{}.other_host_rtt_p50_high_s;
  double rtt_jitter_s = RulesConfig{}.rtt_jitter_high_s;
  double delivery_drop_fraction = RulesConfig{}.delivery_drop_fraction;
  double delivery_clear_fraction = RulesConfig{}.delivery_clear_fraction;
  // The same-host links' delivery rate against their level, on a flat topology: lo's throttle
  // shows there at once (f38, five-phase, 2026-12-07: 0.005-0.007x in the looks right after the
  // intra-host onsets on the ring, every one; over 3,300 looks in clear phases and 93 in the
  // uplink phase no reading under 0.39x). The policies do not act on it (RulesConfig: loopback's
  // rate follows the CPU the ranks leave it); the diagnosis names the link class by it. f38
  // bandit r1 met lo's throttle with the inter-host RTT past its threshold first (10.4 ms, its
  // ring hops waiting on the throttled same-host ones), its move named that link, and the
  // diagnosis kept "other_host" for the intra-host phase while same-host delivery read 0.007x.
  double same_host_delivery_drop_fraction = 0.1;
  // The ring probe (ring_probe_judge.h) reading the ring's links clear: a same-host congestion
  // last seen on a flat topology is no longer carried on hierarchical. The policies' thresholds,
  // but one clear round: a diagnosis wrong for a round costs nothing, a step down does.
  RingProbeThresholds ring_probe{.clear_readings = 1};
  // The job's samples/s rising over its level since it left a flat topology (throughput_rise.h):
  // an inter-host congestion last seen there is no longer carried on hierarchical. The rules'
  // re-probe reads the same rise (RulesConfig::reprobe_rise).
  ThroughputRiseConfig uplink_rise = RulesConfig{}.reprobe_rise;
  // CPU contention: one rank's threads waiting this long per second for a CPU (run-queue wait,
  // summed over its threads). Task migrations are not the signal: clear phases showed 180-192
  // cpu+llc migrations/s, phases with competing busy loops 10-50/s (docs/controller.md).
  double runqueue_wait_s_per_s = 0.2;
  double remote_fault_share = RulesConfig{}.remote_fault_share;  // of NUMA hinting faults
  double node_migrations_per_s = RulesConfig{}.node_migrations_per_s;
  // One rank's step-time median this far above the median rank's: a straggler.
  double straggler_ratio = 1.3;
  // TLB shootdowns per second over the job. Not calibrated on a real storm yet; unshaped 4-rank
  // training here flushes 2,000-5,700 times per second (controller_e2e_test's features).
  double tlb_flushes_per_s = 20000;
};

struct Diagnosis {
  // none | congested_link | straggler | cpu_contention | memory_placement | tlb_storm
  std::string_view cause = "none";
  int rank = -1;         // the rank it concerns; -1 for the whole job
  std::string link;      // congested_link: "same_host" or "other_host:<peer node>"; else empty
  std::string detail;    // one sentence with the figures
  bool carried = false;  // a link diagnosis kept from the last time a flat topology ran
  bool sameAs(const Diagnosis& o) const {
    return cause == o.cause && rank == o.rank && link == o.link;
  }
};

class Diagnoser {
 public:
  explicit Diagnoser(DiagnosisConfig config = {})
      : config_(config), ring_probe_(config.ring_probe), uplink_rise_(config.uplink_rise) {}
  const Diagnosis& update(const Features& f);
  const Diagnosis& last() const { return last_; }
  // The policy moved the job on one link class's congestion (Decision::link, `link` a Link):
  // that link is the diagnosis now, without the hold. The hold keeps one noisy window from
  // flipping the diagnosis; a move is that signal corroborated (the rules climb on it only past
  // its threshold for escalate_steps, or far past it with the throughput down). On netlab's
  // five-phase run the diagnosis came 1.75 s after the onsets (median) against 1.12 s for every
  // rank switched: the window's p50 had to cross, then hold two steps. A move off a flat topology
  // also becomes its last seen link, carried on the next rung, which does not show it (the
  // uplink: the rules climbed on the delivery rate before any window step named it). False when
  // the link shows nothing over its thresholds in `f` (the diagnosis then goes on as before).
  bool decided(const Features& f, int link);

 private:
  // The worst link class over its thresholds. With rtt_observable false (hierarchical: its own
  // traffic pattern moves RTT) only the inter-host delivery rate counts, which a
  // throttled link lowers whatever runs over it.
  bool linkCongestion(const Features& f, Diagnosis& out, bool rtt_observable) const;
  // How far link class `l` is over its thresholds (>= 1: congested), with `out` describing it.
  double linkExcess(const Features& f, int l, Diagnosis& out, bool rtt_observable) const;
  // The part of it that the link class's delivery rate shows (0: none, or not read).
  double deliveryExcess(const Features& f, int l, bool rtt_observable) const;
  Diagnosis raw(const Features& f);
  DiagnosisConfig config_;
  Diagnosis last_;
  // A new cause is reported once it held for kHoldSteps consecutive steps (as the policy's
  // escalate_steps), so one noisy 1 s window does not flip the diagnosis.
  static constexpr int kHoldSteps = 2;
  Diagnosis candidate_;
  int candidate_steps_ = 0;
  Diagnosis flat_link_;     // the link diagnosis last made on a flat topology (none when clear)
  int moved_on_link_ = -1;  // decided() on a flat topology: its link, until the move applied
  // raw() just ended a carried link on a direct reading (a clear ring probe, a rise)
  bool cleared_link_ = false;
  // On hierarchical only, reset on a flat topology: a round taken on the ring before a move
  // (clear, and fresh for 3 s) once ended the same-host congestion the move was made for, 1 s
  // after it.
  RingProbeJudge ring_probe_;
  ThroughputRise uplink_rise_;  // restarted on a flat topology: the level since the job left it
};

}  // namespace bpftrain::collector::controller
