// The rules policy's reading of the signals: each link class (and RDMA, and the job's totals or
// its bus bandwidth without probes) classified against its thresholds, and how far past them a
// class is (the between-steps look and the decisive climb read that).
#include <algorithm>
#include <cstdio>

#include "collector/controller/figures.h"
#include "collector/controller/rules_policy.h"

namespace bpftrain::collector::controller {

RulesPolicy::Signal RulesPolicy::classifyTransport(const TransportView& v, std::string& why) const {
  const RulesConfig& c = config_;
  // Checked in order: the first threshold a signal reaches names the reason.
  struct Trigger {
    const char* what;
    const char* unit;
    double TransportView::*value;
    double RulesConfig::*threshold;
    Signal signal;
  };
  static constexpr Trigger kTriggers[] = {
      {"queued_bytes_p99", "B", &TransportView::queued_bytes_p99, &RulesConfig::queued_bytes_severe,
       Signal::kSevere},
      {"rtt_jitter", "s", &TransportView::rtt_jitter_s, &RulesConfig::rtt_jitter_severe_s,
       Signal::kSevere},
      {"queued_bytes_p99", "B", &TransportView::queued_bytes_p99, &RulesConfig::queued_bytes_high,
       Signal::kCongested},
      {"rtt_jitter", "s", &TransportView::rtt_jitter_s, &RulesConfig::rtt_jitter_high_s,
       Signal::kCongested},
  };
  for (const Trigger& t : kTriggers) {
    const double value = v.*t.value, threshold = c.*t.threshold;
    if (value < threshold) continue;
    const bool bytes = t.unit[0] == 'B';
    char buf[160];
    std::snprintf(buf, sizeof buf, bytes ? "%s=%.0f%s >= %s%.0f%s" : "%s=%.4f%s >= %s%.4f%s",
                  t.what, value, t.unit, t.signal == Signal::kSevere ? "severe " : "", threshold,
                  t.unit);
    why = buf;
    return t.signal;
  }
  if (v.rtt_p50_s >= v.rtt_p50_high_s) {
    why = figures("rtt_p50=%.4fs >= %.4fs", v.rtt_p50_s, v.rtt_p50_high_s);
    return Signal::kCongested;
  }
  if (v.delivery_ratio > 0 && v.delivery_ratio <= c.delivery_drop_fraction) {
    why = figures("delivery rate %.2fx its level <= %.2fx", v.delivery_ratio,
                  c.delivery_drop_fraction);
    return Signal::kCongested;
  }
  // No bandwidth test here: a rung's bandwidth swings with CPU load on a shared host (the demo
  // saw hierarchical at 0.75x its congested-phase best after the congestion lifted). A false
  // all-clear costs one retry of the lower rung, and failed retries back off (decide()).
  // Queued bytes are capped by the socket buffers (primed to wmem_max), so with large gradients
  // they sit near the low threshold congested or not (8.29 MB in the demo's clear phase): only
  // RTT needs to fall below its low thresholds; queue depth must merely not signal congestion.
  if (v.rtt_clears && v.queued_bytes_p99 < c.queued_bytes_high &&
      v.rtt_jitter_s < c.rtt_jitter_low_s && v.rtt_p50_s < v.rtt_p50_low_s &&
      (v.delivery_ratio <= 0 || v.delivery_ratio >= c.delivery_clear_fraction)) {
    why = figures("rtt_p50=%.4fs, rtt_jitter=%.4fs below the low thresholds", v.rtt_p50_s,
                  v.rtt_jitter_s);
    if (v.delivery_ratio > 0)
      why += figures(", delivery rate %.2fx its level", v.delivery_ratio, 0);
    return Signal::kClear;
  }
  // No all-clear from the delivery rate alone, though hierarchical's leaders keep other_host
  // RTT around the low thresholds with nothing throttled (p50 0.4-4.0 ms, jitter 8-19 ms): on
  // netlab's uplink phase hierarchical read only 0.43-0.71x its clear level (2.0-2.2 GB/s),
  // and the readings above kDeliveryDropFraction are learned, so the level eroded to 1.1-1.3
  // GB/s by the phase's end (five-phase.json, 2026-12-04): an all-clear at 0.6x fires inside
  // the throttle, and in the run that tried it stepped down into it three times in 25 s.
  why = "between thresholds";
  return Signal::kNeutral;
}

RulesPolicy::Signal RulesPolicy::classifyRdma(const RdmaSignals& r, std::string& why) const {
  const RulesConfig& c = config_;
  const double loss = r.lossRatio();
  const bool latency = c.rdma_completion_p50_high_s > 0;  // 0: not calibrated, off
  const bool tail = c.rdma_completion_p99_high_s > 0;     // likewise
  if (latency && r.completion_p50_s >= c.rdma_completion_p50_high_s) {
    why =
        figures("completion_p50=%.4fs >= %.4fs", r.completion_p50_s, c.rdma_completion_p50_high_s);
    return Signal::kCongested;
  }
  if (tail && r.completion_p99_s >= c.rdma_completion_p99_high_s) {
    why =
        figures("completion_p99=%.4fs >= %.4fs", r.completion_p99_s, c.rdma_completion_p99_high_s);
    return Signal::kCongested;
  }
  if (loss >= c.rdma_loss_ratio_high) {
    why = figures("loss %.4f per packet >= %.4f", loss, c.rdma_loss_ratio_high);
    return Signal::kCongested;
  }
  if ((!latency || r.completion_p50_s < c.rdma_completion_p50_low_s) &&
      (!tail || r.completion_p99_s < c.rdma_completion_p99_low_s) && loss < c.rdma_loss_ratio_low) {
    why = figures("loss %.4f per packet, completion_p50=%.4fs below the low thresholds", loss,
                  r.completion_p50_s);
    return Signal::kClear;
  }
  why = "between thresholds";
  return Signal::kNeutral;
}

bool RulesPolicy::rdmaReports(const Features& f) {
  // This job's work requests (the verbs probes' completions) over ports that moved packets: port
  // counters alone (no work request of the job in the window) say nothing about its traffic.
  return f.rdma.seen && f.rdma.completion_p99_s > 0 && f.rdma.packets_per_s > 0;
}

RulesPolicy::Signal RulesPolicy::classifyLink(const Features& f, int link, std::string& why,
                                              bool* seen) const {
  std::string link_why;
  Signal s = Signal::kNeutral;
  if (link == kRdmaLink) {
    *seen = rdmaReports(f);
    if (*seen) s = classifyRdma(f.rdma, link_why);
  } else {
    const LinkSignals& ls = f.links[size_t(link)];
    *seen = f.has_transport && f.has_links && ls.seen;
    if (*seen) s = classifyTransport(viewOf(ls, Link(link)), link_why);
  }
  why = std::string(triggerName(link)) + ": " + link_why;
  return s;
}

std::string_view RulesPolicy::triggerName(int link) {
  return link == kRdmaLink ? "rdma" : linkName(Link(link));
}

RulesPolicy::TransportView RulesPolicy::viewOf(const LinkSignals& ls, Link link) const {
  const bool same = link == Link::kSameHost;
  const bool trigger = int(link) == trigger_link_;
  return {ls.queued_bytes_p99,
          ls.rtt_jitter_s,
          ls.rtt_p50_s,
          same ? config_.same_host_rtt_p50_high_s : config_.other_host_rtt_p50_high_s,
          same ? config_.same_host_rtt_p50_low_s : config_.other_host_rtt_p50_low_s,
          same ? 0.0 : ls.delivery_ratio,
          /*rtt_clears=*/!(trigger && trigger_by_delivery_)};
}

RulesPolicy::Signal RulesPolicy::classify(const Features& f, std::string& why, int* link) const {
  const RulesConfig& c = config_;
  *link = -1;
  {
    // The worst link class decides (RDMA is one more class: a congested RDMA link moves the job
    // like a congested TCP one); a class with no traffic in the window says nothing.
    Signal worst = Signal::kClear;
    bool any = false;
    for (int l = 0; l <= kRdmaLink; ++l) {
      bool seen = false;
      std::string link_why;
      const Signal s = classifyLink(f, l, link_why, &seen);
      if (!seen) continue;
      if (!any || s > worst) {
        worst = s;
        *link = l;
        why = std::move(link_why);
      }
      any = true;
    }
    // Unlabelled TCP series (older probes) are judged on the totals below.
    if (any && (f.has_links || !f.has_transport)) return worst;
    if (any && worst > Signal::kNeutral) return worst;
    *link = -1;
  }
  if (f.has_transport)
    return classifyTransport(
        {f.queued_bytes_p99, f.rtt_jitter_s, f.rtt_p50_s, c.rtt_p50_high_s, c.rtt_p50_low_s}, why);
  // No transport probe: judge by bus bandwidth against the best seen (busbw is normalised the
  // same way for every algorithm, so the comparison holds across topologies).
  if (f.busbw_window <= 0 || ring_busbw_best_ <= 0) {
    why = "no transport or bandwidth signal";
    return Signal::kNeutral;
  }
  double ratio = f.busbw_window / ring_busbw_best_;
  if (ratio < c.busbw_drop_fraction) {
    why =
        figures("busbw at %.2f of best (< %.2f), no transport probe", ratio, c.busbw_drop_fraction);
    return Signal::kCongested;
  }
  if (ratio >= c.busbw_clear_fraction) {
    why = figures("busbw at %.2f of best (>= %.2f), no transport probe", ratio,
                  c.busbw_clear_fraction);
    return Signal::kClear;
  }
  why = "busbw between thresholds";
  return Signal::kNeutral;
}

// The window mean lags the congestion by up to a window (1 s); the latest reading (which
// includes a step still running: trainer/telemetry) is current but is one rank's one step. The
// window that far down counts at once; the latest reading only with the signal far past its
// threshold (decisive_signal_factor, farPast()), when the window of a job whose first slow step
// is still running lags by that whole step. A latest reading far down with a signal near its
// threshold counts as one step like any other: in controller_e2e_test's unshaped steady state
// (load 6-9.5, another agent's guest running) one read same_host 5.4 ms (1.07x) with the latest
// 0.43x and the window 0.68x calm, and climbed. (On netlab the throttled ring's first slow steps
// read 101 against 205 calm, but with the RTT far past: the looks between steps catch those.)
bool RulesPolicy::decisive(const Features& f, int link) const {
  if (f.samples_per_s_window <= config_.decisive_throughput_fraction * calm_samples_) return true;
  return farPast(f, link);
}

bool RulesPolicy::farPast(const Features& f, int link) const {
  return excess(f, link) >= config_.decisive_signal_factor && f.samples_per_s > 0 &&
         f.samples_per_s <= config_.congestion_throughput_fraction * calm_samples_;
}

double RulesPolicy::excess(const Features& f, int link) const {
  if (link == kRdmaLink)
    return config_.rdma_loss_ratio_high > 0 ? f.rdma.lossRatio() / config_.rdma_loss_ratio_high : 0;
  if (link < 0 || !f.has_links) return 0;
  const LinkSignals& ls = f.links[size_t(link)];
  const TransportView v = viewOf(ls, Link(link));
  if (!ls.seen) return 0;
  const double rtt = v.rtt_p50_high_s > 0 ? v.rtt_p50_s / v.rtt_p50_high_s : 0;
  // A delivery rate at a fifth of its level is 2x past a 0.4 threshold.
  const double delivery =
      v.delivery_ratio > 0 ? config_.delivery_drop_fraction / v.delivery_ratio : 0;
  return std::max(rtt, delivery);
}

}  // namespace bpftrain::collector::controller
