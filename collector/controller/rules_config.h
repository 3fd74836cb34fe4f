// The rules policy's thresholds, holds and trial parameters (collector/controller/rules_policy.h
// says how they are used), each with the measurement that set it.
#pragma once

#include <chrono>

#include "collector/controller/features.h"
#include "collector/controller/ring_probe_judge.h"
#include "collector/controller/throughput_rise.h"

namespace bpftrain::collector::controller {

struct RulesConfig {
  // Congestion enters above the high thresholds and leaves below the low ones. Calibrated with
  // the TCP probes on netlab (4 ranks, 12-48 MiB allreduces): bytes in flight (p99) sit at
  // 5-8 MB whether or not a link is throttled (socket buffers cap them), so queue depth only
  // backs up the RTT. RTT jitter (p99 - p50) was 5-6 ms unshaped and 14-28 ms throttled with
  // 12 MiB gradients, but 6-13 ms vs 7-20 ms with 48 MiB ones; the RTT median separated every
  // case: 0.5-1.7 ms unshaped, 3-10 ms with intra-host TCP or an uplink throttled.
  double queued_bytes_high = 16.0 * 1024 * 1024;  // TCP bytes queued and unacknowledged (p99)
  double queued_bytes_severe = 64.0 * 1024 * 1024;
  double rtt_jitter_high_s = 0.020;
  // 15 ms, not 10: with 48 MiB gradients unshaped jitter ranged 6-13 ms, and the all-clear
  // needs it low for a whole cooldown, so at 10 ms the demo never stepped back down.
  double rtt_jitter_low_s = 0.015;
  double rtt_jitter_severe_s = 0.100;
  double rtt_p50_high_s = 0.003;
  double rtt_p50_low_s = 0.002;
  // Per link class (the job's totals above are for probes without link labels). RTT rises with
  // CPU load alone on these 2 shared cores, so the per-link medians sit higher than the totals'
  // old calibration. Measured with --features-log (1 s window, 4 ranks on netlab, other agents'
  // builds running): clear ring same_host p50 1.0-3.5 ms, other_host 0.6-3.7 ms (3.2-3.7 ms
  // made controller_e2e_test's steady state switch at a 3 ms threshold); lo throttled to
  // 500 Mbit/s: same_host 9.6-24 ms. One uplink at 2 Gbit/s moved other_host only to 1.6-2.6 ms:
  // RTT does not show that case (see docs/controller.md), and no threshold here pretends to.
  double same_host_rtt_p50_high_s = 0.005;
  double same_host_rtt_p50_low_s = 0.0035;
  double other_host_rtt_p50_high_s = 0.005;
  double other_host_rtt_p50_low_s = 0.0035;
  // The inter-host links' delivery rate (not application-limited) against their own learned
  // level (LinkSignals::delivery_ratio): congested at or below delivery_drop_fraction, clear
  // again at or above delivery_clear_fraction. On netlab (quiet host, 2026-12-04, `ss -ti`
  // every 0.2 s in both hosts, 3 s bins): the ring's other_host median 7-17 Gbit/s unshaped and
  // 1.7-2.0 with host1's uplink at 2 Gbit/s (ratio <= 0.28); hierarchical's 9-12 and 1.6-3.3.
  // Same-host links are not judged on it: loopback runs at whatever CPU the 2 shared cores
  // leave, and their reading ranged 3.6-30 Gbit/s in clear phases of one run (four-phase,
  // features log), where lo throttled shows in their RTT anyway.
  double delivery_drop_fraction = kDeliveryDropFraction;
  double delivery_clear_fraction = 0.6;
  // RDMA, judged as one more link class while the verbs probes see the job's work requests.
  // Measured on numalab's rxe link (4 ranks, two per rxe device, --node-of 0,0,1,1; netem delay
  // on both ends of the veth; --features-log; 3 boots, the first window of each run dropped):
  // the ports' loss events per packet (rxe: duplicate and out-of-sequence requests, sequence
  // NAKs, retries) were 0-0.0154 in 62 of 63 clear windows of every rung (one hierarchical window
  // 0.027), and with 20 ms of delay each way 0-0.085 on the ring (12 of 21 windows >= 0.03) and
  // 0-0.086 on hierarchical (16 of 23), whose leaders cross the same link; 10 ms: 0-0.078.
  double rdma_loss_ratio_high = 0.03;
  double rdma_loss_ratio_low = 0.016;
  // The loss figure comes in bursts: the way back after an RDMA step up needs it clear (and no
  // longer congested) for this long. In an adaptive run with 20 ms of delay each way,
  // hierarchical read under 0.016 for 2 s while the delay was still on, and clear_hold (2 s)
  // stepped down on it; in the calibration no two delayed windows 2 s apart were both clear.
  std::chrono::nanoseconds rdma_clear_hold = std::chrono::seconds(6);
  // Post -> completion median of the worst rank; 0 turns it off, as here: on TCG rxe it did not
  // separate clear from delayed (clear ring 0.016-0.99 s, delayed 0.15-1.84 s; hierarchical read
  // 0.045-0.057 s delayed against 0.013-0.95 s clear in one boot, 0.13-0.97 s against
  // 0.006-0.023 s in another: the guest's CPUs, not the link, set it). A real NIC's figures
  // would give it a value.
  double rdma_completion_p50_high_s = 0;
  double rdma_completion_p50_low_s = 0;
  // Post -> completion p99 of the worst rank (queueing on a congested link shows in the tail
  // first); 0 turns it off, as here for the reason above (TCG's CPUs set it: clear windows read
  // p99 up to 2 s). With a calibrated value it is one more way in: p99 >= high is congested, and
  // the all-clear needs it under low.
  double rdma_completion_p99_high_s = 0;
  double rdma_completion_p99_low_s = 0;
  // Without transport probes: the window's bus bandwidth under this fraction of the best window
  // seen counts as congestion, over `busbw_clear_fraction` as clear. With probes the transport
  // signals alone decide (a higher rung may never reach the ring's bandwidth, and bandwidth
  // swings with CPU load); a false all-clear is caught by the failed-descent backoff below.
  double busbw_drop_fraction = 0.6;
  double busbw_clear_fraction = 0.85;
  int escalate_steps = 2;
  // Congestion counts only while the job's samples/s (1 s window) is at or below this fraction
  // of the rung's smoothed samples/s without congestion (see decide()). Measured: lo throttled
  // cut the ring from 232 to 60 samples/s; with other builds loading the machine (load 15 on 2
  // cores) RTT medians of 5-7 ms came with dips to 0.8x, which 0.85 let through.
  double congestion_throughput_fraction = 0.7;
  // A signal corroborated this strongly (samples/s at or below this fraction of calm: lo
  // throttled cut the ring to 0.26x) is no CPU-load artefact: it escalates on its first step
  // instead of escalate_steps, half a second sooner: the window mean that far down, or the
  // latest reading at congestion_throughput_fraction with the signal far past (decisive()).
  double decisive_throughput_fraction = 0.5;
  // A link class whose RTT median (RDMA: loss per packet) is this many times its high threshold
  // climbs as soon as the latest samples/s reading is at or below congestion_throughput_fraction
  // of calm, on its first step and between window steps too (react(), on react_looks
  // consecutive looks), without waiting for the 1 s window mean. The latest reading counts the
  // training step still running; the window mean lags a whole step. On netlab (four-phase.json,
  // load 5-11) the throttled ring's first step ran 1.44-1.62 s against 0.46-0.68 s calm, only
  // 2.3-2.6x, so a reading at 0.5x calm came just after it had ended (decided 1.35-1.6 s after
  // the change, 0.05-0.09 s past the boundary), and the decision then waited for a second
  // 1.45-1.9 s step at the trainer's boundary: switch at 2.9-3.45 s. At 0.7x the reading falls
  // 1.43x calm into the slow step, ~0.5 s before it ends. 1.5x (7.5 ms) is above every clear
  // median measured (same_host 1.0-3.5 ms, other_host 0.6-3.7 ms) but inside the 5-8 ms that CPU
  // load alone gave other_host in the steady-state e2e test, hence the throughput reading and
  // the second look; throttled lo read 9.4-24 ms. Near the threshold the window mean and
  // escalate_steps still decide.
  double decisive_signal_factor = 1.5;
  int react_looks = 2;
  // A signal this many times its high threshold (RTT median 15 ms; an inter-host delivery rate
  // at 0.13x its level or less) climbs on the first look that finds it far past, not the
  // react_looks-th: CPU load alone moved the RTT medians to 8 ms at most (the steady-state e2e
  // test), so the second look guards the margin above 1.5x, not this. On netlab's five-phase run
  // (2026-12-05) the uplink onsets read delivery 0.04-0.05x one look before the climb.
  double react_single_look_factor = 3.0;
  // Before the rung has a calm reference (a job's first steps, one that starts congested) a
  // signal counts once it held this many consecutive steps (3 s).
  int no_reference_steps = 6;
  // Without link labels (older probes): the all-clear must hold this long on the job's totals.
  std::chrono::nanoseconds cooldown = std::chrono::seconds(10);
  // With link labels: the causing link clear this long steps down; without a verdict on it, the
  // lower rung is re-probed after reprobe_after (doubled per failed probe up to the max).
  std::chrono::nanoseconds clear_hold = std::chrono::seconds(2);
  std::chrono::nanoseconds reprobe_after = std::chrono::seconds(8);
  std::chrono::nanoseconds max_reprobe_after = std::chrono::seconds(32);
  // A re-probe is a bet: if the cause has cleared the lower rung wins back its calm advantage
  // (its calm samples/s before the climb against this rung's now), if not the probe costs the
  // time until the climb back. So the lower rung is re-probed no sooner than that advantage,
  // earned over the wait, repays `reprobe_payback` failed probes: wait >= payback x cost /
  // advantage (within reprobe_after..max_reprobe_after). The cost is the last failed re-probe's
  // time from the step down to the climb back (the whole time counted as lost), before any
  // failed probe `reprobe_cost_guess`. On netlab's four-phase scenario (quiet host, 2026-12-04)
  // a failed re-probe of the ring under throttled lo took 1.0 s to decide and 1.6-1.8 s of
  // steps, and hierarchical ran 0.90-0.97x the ring in clear phases: re-probing every 8 s spent
  // ~8% of the congested phase on the throttled ring to win back ~5% only once it lifted.
  double reprobe_payback = 1.0;
  // The way back from an inter-host link congestion without waiting for the re-probe: the
  // higher rung's own samples/s (the 1 s window) rising over its level since the climb
  // (throughput_rise.h) re-probes the lower rung at once. An uplink throttle slows hierarchical
  // too (its leaders cross it), so its lift shows as a rise; the ring probe cannot tell. Not for
  // the same-host links: hierarchical keeps their traffic in shared memory (its window read up to
  // 1.22x in netlab's intra-host phase with nothing lifted), and the ring probe judges them.
  ThroughputRiseConfig reprobe_rise;
  // After a rise re-probe that failed (a false rise), another rise re-probes only at this many
  // times the false one's reading until the periodic re-probe is due. Before, no other rise
  // counted: f29b rules r1 took a false rise 16 s into the uplink phase (the window at 357
  // after a dip, 1.19x its level) and then sat on hierarchical through clear-last, its window
  // at 470-500 (1.45x), for the 32 s timer.
  double reprobe_rise_beyond_false = 1.05;
  // The ring probe (features.h RingProbe) answers for the ring's links from hierarchical: clear
  // for its rounds in a row, the way back steps down without waiting for a re-probe; congested,
  // no re-probe is tried (it would fail). ring_probe_judge.h.
  RingProbeThresholds ring_probe;
  std::chrono::nanoseconds reprobe_cost_guess = std::chrono::milliseconds(1500);
  // A move up may follow a move down this soon (a failed probe must end quickly); any other
  // move waits min_dwell.
  std::chrono::nanoseconds escalate_dwell = std::chrono::seconds(1);
  // A step down is kept only when the lower rung's samples/s, measured for probe_measure after
  // probe_settle, is at least (1 - probe_loss) x the rung it left (reason probe_slower
  // otherwise, counted as a failed descent).
  // 2 s of settling: in tools/bench adaptive a probe of the ring 1 s after the switch read 137
  // against hierarchical's 164 samples/s in a clear phase the ring then won (switch transients,
  // and rank-reported rates lag by a telemetry interval).
  std::chrono::nanoseconds probe_settle = std::chrono::seconds(2);
  // For this long after a step down the lower rung climbs back only on a signal far past its
  // threshold (farPast(): decisive_signal_factor with the latest reading at or below
  // congestion_throughput_fraction of calm) or a severe one; a marginal one waits for the
  // throughput A/B above. On netlab (four-phase.json, load 5-9) a re-probe of the ring 2.5 s
  // into the clear-again phase climbed back 2.5 s later on same_host RTT 5.2 ms (1.04x) with
  // the window still holding the switch's slow steps (113 samples/s against hierarchical's
  // 176), and the backoff then put the next probe 32 s out: the phase never got the ring back.
  // Throttled lo read 9.4-24 ms on the ring, far past (>= 1.5x) at once.
  std::chrono::nanoseconds descent_settle = std::chrono::seconds(3);
  std::chrono::nanoseconds probe_measure = std::chrono::seconds(2);
  double probe_loss = 0.10;
  // A higher rung can hide the congestion that put us there (hierarchical keeps most traffic
  // off the throttled links), so an all-clear there may be false. A step down that has to climb
  // back within `failed_descent_window` doubles the cooldown, up to `max_cooldown`; one that
  // holds resets it.
  std::chrono::nanoseconds failed_descent_window = std::chrono::seconds(30);
  std::chrono::nanoseconds max_cooldown = std::chrono::seconds(160);
  std::chrono::nanoseconds min_dwell = std::chrono::seconds(5);
  // A communication slowdown the transport signals do not show. Measured: host1's uplink at
  // 2 Gbit/s moved the ring's other_host RTT median only from 0.6-1.5 to 1.6-2.6 ms (under every
  // threshold) while the allreduce's share of the step rose from 53-58% to 67-71%. So samples/s at
  // or below slowdown_fraction of the rung's calm level, with the allreduce share up by
  // slowdown_share_rise over its calm level (a slower CPU lowers that share: compute grows),
  // for slowdown_hold, tries the next rung (reason `slowdown`). An A/B trial: after probe_settle
  // its samples/s over probe_measure must reach (1 + slowdown_gain) x the slow rung's, or it
  // steps back (`probe_slower`), the slow level becomes the rung's calm one, and the next such
  // probe waits slowdown_retry_after, doubled per failure up to max_slowdown_retry_after. A kept
  // one comes back down by the re-probe (nothing can show its cause clearing).
  // 0.85: in tools/bench adaptive's uplink phase the ring fell from ~290 to 210-240 samples/s
  // (0.75-0.85x a calm level that had followed the clear phase's dips) with the share at
  // 0.62-0.66 against ~0.53; clear phases' dips to 0.68x came with no share rise.
  double slowdown_fraction = 0.85;
  double slowdown_share_rise = 0.08;
  std::chrono::nanoseconds slowdown_hold = std::chrono::seconds(3);
  double slowdown_gain = 0.05;
  std::chrono::nanoseconds slowdown_retry_after = std::chrono::seconds(20);
  std::chrono::nanoseconds max_slowdown_retry_after = std::chrono::seconds(160);
  // Pinning: node migrations per second or the remote share of NUMA hint faults -> numa;
  // cpu+llc migrations per second -> compact.
  double node_migrations_per_s = 1.0;
  double remote_fault_share = 0.3;
  double cpu_migrations_per_s = 200.0;  // 4 ranks on 2 CPUs migrate ~60/s unpinned here
  // cpu+llc migrations are no contention signal on their own: on netlab (four-phase.json, 4
  // ranks on 2 cores) clear phases held 180-192/s for 5 s and more with the job at its calm
  // throughput, and compact pinning then cost 8-31% (3 trials, all undone); other builds pushed
  // them to 224-478/s; two busy loops on both cores (real contention: samples/s halved) brought
  // them down to 10-50/s (an idle CPU is what a waking thread migrates to). So they count only
  // while they cost throughput: the window's samples/s at or below pin_cost_fraction of the
  // rung's calm level (which stops following while the signal holds).
  // It holds while at or below pin_cost_release_fraction (steps +-8% apart).
  double pin_cost_fraction = 0.85;
  double pin_cost_release_fraction = 0.92;
  // Pinning is a one-way move, so its signal must hold for `pin_sustain` (a whole window) and
  // keeps holding only while above `pin_release_fraction` of its threshold (hysteresis). The
  // 2-step (1 s) trigger pinned an unshaped steady-state run (controller_e2e_test) while other
  // builds loaded this 2-core machine; load that keeps the job's threads migrating at
  // 224-239/s for 5 s and more still pins, once.
  std::chrono::nanoseconds pin_sustain = std::chrono::seconds(5);
  double pin_release_fraction = 0.75;
  // A pinning move is an A/B trial inside the run: after pin_settle, throughput over pin_measure
  // is compared with the steps before the move. It is kept when it does not cost more than
  // pin_loss and either gains pin_gain or cuts the signal that caused it by pin_signal_drop;
  // otherwise it is undone and not retried for pin_retry_after. A topology change during the
  // trial ends it without a verdict (the comparison no longer holds), keeping the pinning.
  std::chrono::nanoseconds pin_settle = std::chrono::seconds(2);
  std::chrono::nanoseconds pin_measure = std::chrono::seconds(4);
  double pin_gain = 0.02;
  double pin_loss = 0.03;
  // Cheaper to try: after pin_settle, a first pin_early_measure that already costs pin_early_loss
  // undoes the move without waiting out pin_measure (the undone trials above lost 25% and 31%;
  // one that lost 8% still takes the whole measure).
  // The settling time and both measures count from the step the ranks report the new pinning,
  // not from the decision: in numalab's guest (TCG) the move was applied 0.5-1 s after it was
  // decided, and its first readings then carried the move's own page migrations, so a verdict
  // counted from the decision undid a numa pin that was cutting remote faults (the
  // ControllerMovesAMisplacedRunToNumaAndRemoteFaultsFall flake). The early undo also needs
  // pin_early_readings consecutive readings each at or below the bar, and the bar is at least
  // pin_early_noise_factor times the steps' relative spread before the move (mean absolute
  // deviation over the samples/s EWMA): one noisy reading on a shared host is no verdict.
  std::chrono::nanoseconds pin_early_measure = std::chrono::seconds(1);
  double pin_early_loss = 0.10;
  int pin_early_readings = 2;
  double pin_early_noise_factor = 2.0;
  double pin_signal_drop = 0.5;
  std::chrono::nanoseconds pin_retry_after = std::chrono::seconds(120);
};

}  // namespace bpftrain::collector::controller
