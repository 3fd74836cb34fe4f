// Threshold rules: congestion signals (transport queue depth p99, RTT jitter and median per link
// class; RDMA loss per packet as one more class; bus bandwidth drop when no transport or RDMA
// probe reports) move the topology one level at a
// time along ring -> hierarchical -> halving-doubling and back. Escalating needs the signal for
// `escalate_steps` consecutive steps and `escalate_dwell` since the last move.
// The way back is judged on the link class that caused the step up: clear there (below the low
// thresholds, hysteresis) for `clear_hold` steps back down. A higher rung often cannot show that
// link at all (hierarchical moves same-host traffic to shared memory) or loads it with its own
// pattern (its leaders' large inter-host transfers keep RTT high), so without an all-clear the
// lower rung is re-probed every `reprobe_after`, doubled after each probe that had to climb back
// (up to `max_reprobe_after`): the failed-descent backoff.
// A slowdown the links do not show (throughput down, the allreduce's share of the step up) tries
// the next rung as an A/B trial, kept only when it runs faster; its way back is the re-probe.
// Pinning is moved once, from none, by migration and cross-node signals.
// Files: rules_config.h (thresholds, holds, trial parameters), rules_signals.cc (classifying the
// link classes), rules_policy.cc (the ladder: what counts as congestion or a slowdown, the calm
// levels, the climbs and the order of the moves), rules_way_back.cc (the all-clear, the re-probe
// and the A/B trials of a move), rules_pinning.cc (the pinning move and its trial).
#pragma once

#include <optional>

#include "collector/controller/policy.h"
#include "collector/controller/ring_probe_judge.h"
#include "collector/controller/rules_config.h"

namespace bpftrain::collector::controller {

class RulesPolicy final : public Policy {
 public:
  // Readings a rung's calm level takes as a plain mean after a climb (~5 s at 500 ms steps);
  // then an EWMA of weight 1 / this.
  static constexpr int kCalmFirstReadings = 10;
  explicit RulesPolicy(RulesConfig config = {})
      : config_(config), rise_(config.reprobe_rise), ring_probe_(config.ring_probe) {}
  std::string_view name() const override { return "rules"; }
  Decision decide(const Features& features, const Arm& current, int64_t now_ns) override;
  // Between steps: only the climb on a signal far past its threshold that the latest reading
  // confirms (decisive_signal_factor); everything else waits for decide().
  Decision react(const Features& features, const Arm& current, int64_t now_ns) override;

 private:
  enum class Signal { kClear, kNeutral, kCongested, kSevere };
  // The transport signals of one link class, or of the job's totals.
  struct TransportView {
    double queued_bytes_p99, rtt_jitter_s, rtt_p50_s;
    double rtt_p50_high_s, rtt_p50_low_s;  // the link class's thresholds
    double delivery_ratio = 0;             // 0: unknown (LinkSignals::delivery_ratio)
    // Whether its RTT may clear it (not the causing link after some climbs: see climb()).
    bool rtt_clears = true;
  };
  TransportView viewOf(const LinkSignals& ls, Link link) const;
  Signal classifyTransport(const TransportView& v, std::string& why) const;
  // RDMA is judged as one more link class, after the TCP ones (trigger_link_ == kRdmaLink).
  static constexpr int kRdmaLink = kLinkCount;
  Signal classifyRdma(const RdmaSignals& r, std::string& why) const;
  static bool rdmaReports(const Features& f);
  // A link class's (or RDMA's) signal; *seen false when it had no traffic in the window.
  Signal classifyLink(const Features& f, int link, std::string& why, bool* seen) const;
  static std::string_view triggerName(int link);
  // The job's signal: the worst link class's (its index in *link, -1 for totals or bandwidth).
  bool decisive(const Features& f, int link) const;
  // The link class far past its threshold (decisive_signal_factor) with the latest reading at or
  // below congestion_throughput_fraction of calm.
  bool farPast(const Features& f, int link) const;
  // How many times its high threshold the link class's signal is (RTT median; RDMA loss per
  // packet); 0 for the job's totals and bandwidth.
  double excess(const Features& f, int link) const;
  // A move up may go now (min_dwell, or escalate_dwell after a step down).
  bool escalateOk(int64_t now_ns) const;
  // Within descent_settle of a step down (the last move).
  bool settlingAfterDescent(int64_t now_ns) const;
  // The climb to `wanted` on `signal` of `link`; by_link: the step up being left was caused by a
  // link class (how the failed-descent backoff is reported).
  void climb(const Features& f, Decision& d, Signal signal, int wanted, int link,
             const std::string& why, bool by_link, int64_t now_ns);
  // The rung a signal of `link` asks for (0 ring, 1 hierarchical, 2 halving-doubling).
  static int wantedLevel(Signal signal, int link);
  // Counts congested_steps_: the steps whose signal asks for a higher rung and costs throughput
  // against this rung's calm level (or needs not: no reference yet, severe, no transport probe).
  // Appends to `why` whether the step counted.
  void countCongestion(const Features& f, Signal signal, int link, int level, int wanted,
                       std::string& why);
  // A slowdown the links do not show (slow_since_ns_, its level), and otherwise this rung's calm
  // levels (samples/s, allreduce share).
  void followCalm(const Features& f, int level, int wanted, int64_t now_ns);
  // Whether the last climb's cause is a link class (or RDMA) the features still show.
  bool byLink(const Features& f) const {
    return trigger_link_ >= 0 && (f.has_links || trigger_link_ == kRdmaLink);
  }
  // The way back this step, judged on the cause of the last climb (rules_way_back.cc). Sets
  // clear_since_ns_ while the all-clear reads clear, and the clocks of the verdicts from this rung
  // (rdma_congested_ns_, link_throttled_ns_, the ring probe's rounds).
  struct WayBack {
    bool by_link = false;          // judged on the link class (or RDMA) that caused the climb
    bool still_congested = false;  // a verdict from this rung that the cause holds: no re-probe
    int64_t hold_ns = 0;           // how long the all-clear must hold before the step down
    std::string why;               // what the all-clear read
  };
  WayBack wayBack(const Features& f, Signal signal, const std::string& why, int level,
                  int64_t now_ns);
  // Bookkeeping after any move: another rung's references, dwell, counts.
  void moved(Decision& d, const Arm& current, bool ascent_failed, int64_t now_ns);
  // The "before" of the trials: samples/s, its spread and the pinning signals, smoothed.
  void updateTrialBaselines(const Features& f);
  // The pinning trial's verdict this step (an undo), when nothing else moved
  // (rules_pinning.cc).
  void pinTrialVerdict(const Features& f, const Arm& current, Decision& d, int64_t now_ns);
  // Pinning moves once, away from none, on signals that held; it starts a trial.
  void considerPinning(const Features& f, const Arm& current, Decision& d, bool dwell_ok,
                       int64_t now_ns);
  Signal classify(const Features& f, std::string& why, int* link) const;

  RulesConfig config_;
  int congested_steps_ = 0;
  int pin_steps_ = 0;
  int64_t pin_since_ns_ = -1;  // since when the pinning signal holds (-1: it does not)
  int64_t clear_since_ns_ = -1;
  int64_t rdma_congested_ns_ = -1;  // when the rdma class last read congested on a higher rung
  int64_t link_throttled_ns_ = -1;  // when the trigger link's delivery rate last read throttled
  // The causing link showed congestion by its delivery rate alone: its RTT does not clear it.
  bool trigger_by_delivery_ = false;
  int64_t last_switch_ns_ = -1;
  double ring_busbw_best_ = 0;  // best bus bandwidth seen so far (fallback without probes)
  int64_t cooldown_ns_ =
      -1;  // the current all-clear cooldown (config_.cooldown, doubled on failure)
  int64_t last_descent_ns_ = -1;
  struct PinTrial {
    PinMode mode;
    Topology topology;
    int64_t decided_ns;
    double before_samples_per_s, before_signal;
    double before_noise;      // relative spread of the readings before the move
    int64_t applied_ns = -1;  // the first step the ranks reported it
    double sum_samples = 0, sum_signal = 0;
    int n = 0;
    int early_hits = 0;  // consecutive readings at or below the early bar
  };
  // The signal a pinning trial judges: node moves plus remote NUMA hint faults per second for
  // numa, cpu+llc moves for compact.
  static double pinSignal(const Features& f, PinMode mode);
  // The pending trial's verdict this step, if it has one: true to undo.
  bool pinTrialUndo(const Features& f, const Arm& current, int64_t now_ns, std::string& why);
  std::optional<PinTrial> pin_trial_;
  struct DescentTrial {
    Topology to;
    int64_t decided_ns;
    double before;  // samples/s of the rung left, smoothed
    double sum = 0;
    int n = 0;
  };
  void startDescentTrial(Topology from, Topology to, int64_t now_ns);
  // A trial's throughput once measured (probe_settle, then probe_measure on its rung), which
  // ends it; nothing before that. One never applied is dropped after twice that time.
  struct TrialResult {
    double after, before;
  };
  std::optional<TrialResult> measureTrial(std::optional<DescentTrial>& trial, const Features& f,
                                          const Arm& current, int64_t now_ns);
  std::optional<DescentTrial> descent_trial_;
  // The A/B of a slowdown probe: the same measurement upwards (ascent_from_: the slow rung).
  std::optional<DescentTrial> ascent_trial_;
  Topology ascent_from_ = Topology::kRing;
  double calm_share_ = -1;          // this rung's allreduce share while calm (smoothed)
  int64_t slow_since_ns_ = -1;      // since when the slowdown holds (-1: it does not)
  int64_t slowdown_retry_ns_ = -1;  // the current wait after a failed slowdown probe
  int64_t slowdown_blocked_until_ns_ = -1;
  bool hidden_trigger_ = false;  // this rung was reached by a kept slowdown probe
  Topology descent_trial_from_ = Topology::kRing;
  int64_t pin_blocked_until_ns_ = -1;
  double samples_ewma_ = -1, pin_signal_ewma_[kPinModeCount] = {};
  double samples_dev_ewma_ = 0;  // mean absolute deviation of samples/s from samples_ewma_
  double calm_samples_ = -1;     // this rung's smoothed samples/s while not congested
  int calm_readings_ = 0;        // readings in calm_samples_ since the move (decide())
  // The calm levels hold a reading, and after a climb their first kCalmFirstReadings: before
  // that the first window still holds the rung left, and nothing is judged against them.
  bool calmKnown() const {
    return calm_samples_ > 0 && (!calm_since_climb_ || calm_readings_ >= kCalmFirstReadings);
  }
  bool calm_since_climb_ = false;  // the calm levels are relearnt since a climb (moved())
  int react_looks_ = 0;            // consecutive looks between steps that found farPast() (react())
  int signal_steps_ = 0;           // consecutive steps whose signal asks for a higher rung
  int trigger_link_ = -1;          // the link class whose signal made the last step up (-1: none)
  int64_t reprobe_ns_ = -1;  // the current re-probe interval (reprobe_after, doubled on failure)
  // The wait before re-probing the lower rung: reprobe_ns_, or longer while what the lower rung
  // could win back does not repay a failed probe (RulesConfig::reprobe_payback). Sets `why`.
  int64_t reprobeWaitNs(std::string& why) const;
  double left_calm_samples_ = -1;      // the calm samples/s of the rung left by the last climb
  int64_t failed_probe_cost_ns_ = -1;  // the last failed re-probe: step down to climb back
  // The slow level of a slowdown: the mean of its readings (the trial's "before"; the smoothed
  // level still carries the calm steps before it).
  double slow_sum_ = 0;
  int slow_n_ = 0;
  int64_t on_rung_since_ns_ = -1;  // when the current rung was entered (re-probe clock)
  // This rung's samples/s over its level since the move (RulesConfig::reprobe_rise).
  ThroughputRise rise_;
  // A rise re-probe that failed: until the periodic one is due, only a rise beyond it
  // (RulesConfig::reprobe_rise_beyond_false) re-probes.
  bool rise_failed_ = false;
  bool rise_reprobe_ = false;  // the pending step down was a rise re-probe
  double rise_reading_ = 0;    // the window's samples/s at the last rise re-probe
  // Whether this rung's samples/s rose over its level since the climb (updates the level).
  bool risen(const Features& f, int level, bool by_link, int64_t now_ns, std::string& why);
  // The ring's links judged from hierarchical by the ring probe (RulesConfig::ring_probe_*).
  RingProbeJudge ring_probe_;
};

}  // namespace bpftrain::collector::controller
