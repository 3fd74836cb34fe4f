#include "collector/top/view.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace bpftrain::top {
namespace {

std::string fmt(const char* f, double v) {
  char b[64];
  std::snprintf(b, sizeof b, f, v);
  return b;
}

std::string pad(std::string s, size_t w) {
  if (s.size() < w) s.append(w - s.size(), ' ');
  return s;
}

std::string rpad(const std::string& s, size_t w) {
  return s.size() >= w ? s : std::string(w - s.size(), ' ') + s;
}

std::string orDash(double v, std::string (*f)(double)) { return v < 0 ? "-" : f(v); }

std::string rate(double r) { return r < 0 ? "-" : formatCount(r) + "/s"; }

std::string joinParts(const SignalRow& row, bool bytes, bool seconds) {
  std::string out;
  for (const SignalRow::Part& p : row.parts) {
    if (!out.empty()) out += "  ";
    if (!p.label.empty()) out += p.label + " ";
    if (!row.counter)
      out += bytes ? formatBytes(p.value) : seconds ? formatSeconds(p.value) : formatCount(p.value);
    else
      out += rate(p.rate) + " (" + formatCount(p.value) + ")";
  }
  return out;
}

}  // namespace

std::string formatSeconds(double s) {
  if (!std::isfinite(s)) return "-";
  if (s < 1e-3) return fmt("%.0fus", s * 1e6);
  if (s < 1) return fmt("%.2fms", s * 1e3);
  return fmt("%.2fs", s);
}

std::string formatBytes(double b) {
  if (!std::isfinite(b)) return "-";
  if (b >= 1e9) return fmt("%.2fGB", b / 1e9);
  if (b >= 1e6) return fmt("%.2fMB", b / 1e6);
  if (b >= 1e3) return fmt("%.1fkB", b / 1e3);
  return fmt("%.0fB", b);
}

std::string formatCount(double c) {
  if (!std::isfinite(c)) return "-";
  if (c >= 1e9) return fmt("%.2fG", c / 1e9);
  if (c >= 1e6) return fmt("%.2fM", c / 1e6);
  if (c >= 1e4) return fmt("%.1fk", c / 1e3);
  if (c == std::floor(c)) return fmt("%.0f", c);
  return fmt("%.1f", c);
}

std::vector<std::string> renderScreen(const JobView& v, const Header& h, int width, int height) {
  std::vector<std::string> top, ranks, rest;
  const size_t w = size_t(std::max(width, 1));

  top.push_back("bpftrain-top  job " + (v.job.empty() ? std::string("(none yet)") : v.job) +
                "  from " + h.source + "  every " + fmt("%.1fs", h.interval_s) + "  " + h.clock +
                "  (q quits)");
  if (!h.status.empty()) top.push_back("! " + h.status);
  if (v.jobs.size() > 1) {
    std::string others;
    for (const auto& j : v.jobs)
      if (j != v.job) others += (others.empty() ? "" : ", ") + j;
    top.push_back("other jobs: " + others + " (--job NAME)");
  }
  std::string topo, pin;
  double epoch = -1;
  for (const RankRow& r : v.ranks) {
    if (topo.empty())
      topo = r.topology;
    else if (!r.topology.empty() && r.topology != topo)
      topo = "mixed";
    if (pin.empty())
      pin = r.pinning;
    else if (!r.pinning.empty() && r.pinning != pin)
      pin = "mixed";
    epoch = std::max(epoch, r.epoch);
  }
  top.push_back("throughput " +
                (v.samples_per_second < 0 ? std::string("-") : formatCount(v.samples_per_second)) +
                " samples/s   ranks " + std::to_string(v.ranks.size()) + "   topology " +
                (topo.empty() ? "-" : topo) + "   pinning " + (pin.empty() ? "-" : pin) +
                "   epoch " + (epoch < 0 ? std::string("-") : formatCount(epoch)));
  top.push_back("");
  top.push_back(pad("RANK", 6) + rpad("SAMPLES/S", 10) + rpad("STEP p50", 10) + rpad("p90", 10) +
                rpad("p99", 10) + rpad("ALLRED%", 9) + rpad("BUSBW/s", 10) + "  " +
                pad("TOPOLOGY", 18) + pad("PINNING", 9) + rpad("EPOCH", 6) + rpad("STEP", 8));
  for (const RankRow& r : v.ranks) {
    ranks.push_back(pad(r.rank, 6) + rpad(orDash(r.samples_per_second, formatCount), 10) +
                    rpad(orDash(r.step_p50, formatSeconds), 10) +
                    rpad(orDash(r.step_p90, formatSeconds), 10) +
                    rpad(orDash(r.step_p99, formatSeconds), 10) +
                    rpad(r.allreduce_share < 0 ? "-" : fmt("%.0f%%", 100 * r.allreduce_share), 9) +
                    rpad(orDash(r.busbw, formatBytes), 10) + "  " +
                    pad(r.topology.empty() ? "-" : r.topology, 18) +
                    pad(r.pinning.empty() ? "-" : r.pinning, 9) +
                    rpad(orDash(r.epoch, formatCount), 6) + rpad(orDash(r.step, formatCount), 8));
  }
  if (v.ranks.empty()) ranks.push_back("(no rank reports yet)");

  rest.push_back("");
  std::string diag;
  for (const DiagnosisRow& d : v.diagnosis) {
    if (!diag.empty()) diag += ";  ";
    diag += d.cause;
    if (!d.link.empty()) diag += " link " + d.link;
    if (!d.rank.empty() && d.rank != "-1") diag += " rank " + d.rank;
  }
  rest.push_back("DIAGNOSIS  " +
                 (diag.empty() ? std::string("- (no controller diagnosis for this job)") : diag));
  rest.push_back("DECISIONS  " + (v.decisions.empty() ? std::string("none yet") : ""));
  for (size_t i = 0; i < v.decisions.size() && i < 3; ++i) {
    const DecisionRow& d = v.decisions[i];
    rest.push_back("  " + d.from + " -> " + d.to + "  reason " + d.reason + "  x" +
                   formatCount(d.count) + (d.last_change_s >= 0 ? "  (while watching)" : ""));
  }
  rest.push_back("HOST" + std::string(v.host.empty() ? "       no host signals for this job" : ""));
  for (const SignalRow& s : v.host)
    rest.push_back("  " + pad(s.name, 19) + joinParts(s, false, false));
  rest.push_back("TRANSPORT" +
                 std::string(v.transport.empty() ? "  no transport signals for this job" : ""));
  for (const SignalRow& s : v.transport)
    rest.push_back("  " + pad(s.name, 19) +
                   joinParts(s, s.name.find("bytes") != std::string::npos,
                             s.name.find("rtt") != std::string::npos));
  const CollectorHealth& c = v.health;
  rest.push_back("COLLECTOR  ingest " + rate(c.samples_rate) + "  decode errors " +
                 formatCount(c.decode_errors) + "  frames lost " + formatCount(c.frames_lost) +
                 "  kernel drops " + formatCount(c.kernel_drops) + "  dropped " +
                 formatCount(c.dropped) + "  series " + orDash(c.series, formatCount) +
                 (c.series_limit > 0 ? "/" + formatCount(c.series_limit) : ""));
  std::string probes = "  probes up " + std::to_string(c.probes_up.size()) + "/" +
                       std::to_string(c.probes_up.size() + c.probes_down.size());
  if (!c.probes_down.empty()) {
    probes += "  down:";
    for (const auto& p : c.probes_down) probes += " " + p;
  }
  rest.push_back(probes);

  // Fit: header and the lower sections first; ranks get what is left (at least one line).
  const size_t hmax = size_t(std::max(height, 1));
  size_t room = hmax > top.size() + rest.size() ? hmax - top.size() - rest.size() : 1;
  if (ranks.size() > room) {
    size_t hidden = ranks.size() - (room - 1);
    ranks.resize(room - 1);
    ranks.push_back("  ... " + std::to_string(hidden) +
                    " more ranks (a taller terminal shows them)");
  }
  std::vector<std::string> out = top;
  out.insert(out.end(), ranks.begin(), ranks.end());
  out.insert(out.end(), rest.begin(), rest.end());
  if (out.size() > hmax) out.resize(hmax);
  for (std::string& l : out)
    if (l.size() > w) l.resize(w);
  return out;
}

}  // namespace bpftrain::top
