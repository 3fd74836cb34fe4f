// What bpftrain-top shows about one job, built from successive /metrics scrapes: per-rank
// throughput and step quantiles, the running topology and pinning, the controller's decisions,
// host and transport signals as rates between two scrapes, and the collector's own health.
// Pure (no I/O, no clock): the caller passes each scrape and its time, so tests drive it.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "collector/top/metrics_text.h"

namespace bpftrain::top {

struct RankRow {
  std::string rank;
  double samples_per_second = -1;                      // -1: not reported
  double step_p50 = -1, step_p90 = -1, step_p99 = -1;  // seconds, over the collector's window
  double allreduce_share = -1;                         // allreduce time / step time in the window
  double busbw = -1;                                   // bytes/s, last step
  std::string topology, pinning;
  double epoch = -1, step = -1;
};

struct DecisionRow {
  std::string from, to, reason;
  double count = 0;
  double last_change_s = -1;  // scrape time when its count last grew (-1: before we started)
};

// One line of host or transport signals: a name, and per label value a rate and a total.
struct SignalRow {
  std::string name;  // e.g. "migrations"
  struct Part {
    std::string label;  // e.g. "node" (empty: the whole metric)
    double rate = -1;   // per second between the last two scrapes (-1: one scrape yet)
    double value = 0;   // counter total, or the gauge / quantile value
  };
  std::vector<Part> parts;
  bool counter = true;  // false: parts hold values (quantiles), not rates
};

// The controller's diagnosis now (bpftrain_diagnosis_info == 1): what slows the job.
struct DiagnosisRow {
  std::string cause;  // none, congested_link, straggler, cpu_contention, ...
  std::string rank;   // "-1": the whole job
  std::string link;   // when the cause is a link
};

struct CollectorHealth {
  double samples_rate = -1;
  double decode_errors = 0, decode_errors_rate = -1;
  double frames_lost = 0, kernel_drops = 0, dropped = 0, statsd_ignored = 0;
  double series = -1, series_limit = -1;
  std::vector<std::string> probes_up, probes_down;
};

struct JobView {
  std::string job;                      // the job shown ("" when the collector has none yet)
  std::vector<std::string> jobs;        // every job the collector knows
  double samples_per_second = -1;       // sum over ranks
  std::vector<RankRow> ranks;           // by rank number
  std::vector<DecisionRow> decisions;   // most recent change first
  std::vector<DiagnosisRow> diagnosis;  // empty: the controller does not diagnose this job
  std::vector<SignalRow> host, transport;
  CollectorHealth health;
  int scrapes = 0;
};

class Model {
 public:
  explicit Model(std::string job = "") : wanted_job_(std::move(job)) {}

  // One scrape taken at now_s (any monotonic seconds).
  void update(const std::vector<Sample>& samples, double now_s);
  const JobView& view() const { return view_; }

 private:
  double rateOf(const std::string& key, double value, double now_s);

  std::string wanted_job_;
  JobView view_;
  // Counter values of the previous scrape, by series key, for rates.
  std::map<std::string, std::pair<double, double>> previous_;  // key -> (value, time)
  std::map<std::string, std::pair<double, double>> current_;
  std::map<std::string, DecisionRow> decisions_;  // by from|to|reason
};

}  // namespace bpftrain::top
