#include "collector/controller/nccl_controller.h"

#include <sys/random.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <set>

#include "collector/controller/features.h"
#include "common/clock.h"
#include "common/control_frame.h"
#include "common/hmac.h"

namespace bpftrain::collector::controller {
namespace {

using window::SeriesSnapshot;

const std::string* label(const SeriesSnapshot& s, std::string_view name) {
  for (const auto& [k, v] : s.labels)
    if (k == name) return &v;
  return nullptr;
}

int rankOf(const std::string& r) {
  char* end = nullptr;
  long v = std::strtol(r.c_str(), &end, 10);
  return (end != r.c_str() && *end == '\0' && v >= 0) ? int(v) : -1;
}

// The plugin's comm label: 16 hex digits of the commId, or "any" (tuner before v5: comm 0).
std::optional<uint64_t> commIdOf(const std::string& comm) {
  if (comm == "any") return 0;
  if (comm.empty() || comm.size() > 16) return std::nullopt;
  char* end = nullptr;
  unsigned long long v = std::strtoull(comm.c_str(), &end, 16);
  if (*end != '\0') return std::nullopt;
  return uint64_t(v);
}

// Collectives since creation of a distribution series: its +Inf bucket.
double countOf(const SeriesSnapshot& s) {
  return s.bucket_counts.empty() ? 0 : double(s.bucket_counts.back());
}

struct RankView {
  double calls = -1;
  double epoch = 0;
};

struct CommView {
  std::map<int, RankView> ranks;
  std::map<int, NcclTotals> totals;  // by collective
};

// The fields every record of a decision in flight carries (applied or abandoned).
nlohmann::json pendingRecord(const char* event, const std::string& job, const std::string& comm,
                             uint64_t epoch, const NcclArm& to, uint64_t start_call) {
  return {{"event", event},
          {"policy", "nccl"},
          {"job", job},
          {"comm", comm},
          {"epoch", epoch},
          {"to", ncclArmName(to)},
          {"start_call", start_call},
          {"wall_ns", realtimeNowNs()}};
}

}  // namespace

std::unique_ptr<NcclController> NcclController::create(NcclControllerConfig config,
                                                       window::SeriesStore* metrics,
                                                       NcclSendFn send, std::string& error) {
  std::unique_ptr<NcclController> c(new NcclController());
  if (config.mode == ControlMode::kAct) {
    if (config.secret.empty()) {
      if (config.secret_file.empty()) {
        error =
            "needs --secret FILE (the file the ranks' "
            "BPFTRAIN_SECRET_FILE names), or --control-mode advise to only recommend";
        return nullptr;
      }
      std::optional<std::string> read = readSecretFile(config.secret_file, error);
      if (!read) return nullptr;
      config.secret = *read;
    }
    if (!send) {
      error = "no socket to send decisions from";
      return nullptr;
    }
  }
  if (!c->log_.open(config.decisions_log, "decisions log", error)) return nullptr;
  if (getrandom(&c->sender_id_, sizeof c->sender_id_, GRND_NONBLOCK) != sizeof c->sender_id_)
    c->sender_id_ = uint64_t(getpid()) << 32 ^ uint64_t(monotonicNowNs());
  c->config_ = std::move(config);
  c->send_ = std::move(send);
  c->metrics_ = metrics;
  return c;
}

NcclController::~NcclController() = default;

void NcclController::count(const metrics::MetricDef& metric,
                           std::initializer_list<window::Label> labels, double value,
                           int64_t now_ns) {
  if (metrics_ != nullptr)
    window::recordMetric(*metrics_, config_.writer, metric, labels, value, now_ns);
}

bool NcclController::sendDecision(CommState& c, const std::vector<const NcclSender*>& to,
                                  uint64_t epoch, uint64_t start_call, int collective,
                                  const NcclArm& arm, int64_t now_ns) {
  wire::NcclControl frame;
  frame.job = c.job;
  frame.epoch = epoch;
  frame.comm_id = c.comm_id;
  frame.start_call = start_call;
  frame.collective = collective < 0 ? wire::kNcclAny : uint8_t(collective);
  frame.algorithm = arm.algorithm;
  frame.protocol = arm.protocol;
  frame.channels = 0;
  frame.timestamp_ns = uint64_t(realtimeNowNs());
  std::array<uint8_t, wire::kMaxFrameSize> buf{};
  // One signature for every rank: the frames are identical, only the address differs.
  size_t n = wire::encodeSignedNcclControl(buf, sender_id_, sequence_++, frame, config_.secret);
  if (n == 0) {
    std::fprintf(stderr, "NCCL controller: decision for job %s did not encode\n", c.job.c_str());
    return false;
  }
  bool all = true;
  for (const NcclSender* s : to) {
    std::string error;
    if (send_(s->address, std::span<const uint8_t>(buf.data(), n), error)) {
      ++stats_.sends;
      count(metrics::kControllerSends, {{"result", "ok"}}, 1, now_ns);
    } else {
      all = false;
      ++stats_.send_errors;
      count(metrics::kControllerSends, {{"result", "error"}}, 1, now_ns);
      std::fprintf(stderr, "NCCL controller: job %s rank %u: %s\n", c.job.c_str(), s->rank,
                   error.c_str());
    }
  }
  return all;
}

void NcclController::onStep(const window::SeriesStore& store, std::span<const NcclSender> senders,
                            int64_t now_ns) {
  if (senders.empty()) return;  // no NCCL plugin rank said hello: nothing to read
  std::vector<SeriesSnapshot> snaps = store.snapshot(now_ns);
  // ---- what each communicator's ranks reported
  std::map<std::pair<std::string, std::string>, CommView> views;
  for (const SeriesSnapshot& s : snaps) {
    if (s.name.rfind("bpftrain_nccl_", 0) != 0) continue;
    const std::string *job = label(s, "job"), *rank = label(s, "rank"), *comm = label(s, "comm");
    if (job == nullptr || rank == nullptr || comm == nullptr || *comm == "pxn") continue;
    if (!config_.job.empty() && *job != config_.job) continue;
    const int r = rankOf(*rank);
    if (r < 0) continue;
    if (s.name == metrics::kNcclTunerCalls.name) {
      if (now_ns - s.last_update_ns > config_.fresh.count()) continue;
      views[{*job, *comm}].ranks[r].calls = s.last;
    } else if (s.name == metrics::kNcclDecisionEpoch.name) {
      views[{*job, *comm}].ranks[r].epoch = s.last;
    } else if (s.name == metrics::kNcclCollectiveSeconds.name ||
               s.name == metrics::kNcclCollectives.name ||
               s.name == metrics::kNcclCollectiveBytes.name) {
      const std::string *coll = label(s, "collective"), *algo = label(s, "algorithm"),
                        *proto = label(s, "protocol");
      if (coll == nullptr || algo == nullptr || proto == nullptr) continue;
      const int ci = ncclIndex(kNcclCollectiveNames, *coll);
      const int ai = ncclIndex(kNcclAlgorithmNames, *algo);
      const int pi = ncclIndex(kNcclProtocolNames, *proto);
      if (ci < 0 || ai < 0 || pi < 0) continue;
      NcclTotals& t = views[{*job, *comm}].totals[ci];
      if (s.name == metrics::kNcclCollectiveSeconds.name) {
        t.seconds += s.total;
        t.timed += countOf(s);
      } else if (s.name == metrics::kNcclCollectives.name) {
        t.count += s.total;
        t.by_arm[NcclArm{uint8_t(ai), uint8_t(pi)}] += s.total;
      } else {
        t.bytes += s.total;
      }
    }
  }

  std::map<std::string, Features> kernel;  // host signals per job, extracted once per step
  for (auto& [key, view] : views) {
    const auto& [job, comm] = key;
    std::optional<uint64_t> comm_id = commIdOf(comm);
    if (!comm_id) continue;
    auto [it, fresh_comm] = comms_.try_emplace(key);
    CommState& c = it->second;
    if (fresh_comm) {
      c.job = job;
      c.comm = comm;
      c.comm_id = *comm_id;
      c.policy = NcclPolicy(config_.policy);
    }
    // Every rank of the communicator must report here, or a switch could leave one behind.
    uint32_t world = 0;
    // A rank may have two senders for a while (a restarted process before the old one
    // expires): both get the decision.
    std::map<uint32_t, std::vector<const NcclSender*>> by_rank;
    for (const NcclSender& s : senders) {
      if (s.job != job || s.address.length == 0) continue;
      world = std::max(world, s.world);
      by_rank[s.rank].push_back(&s);
    }
    size_t reporting = 0;
    std::vector<const NcclSender*> to;
    double max_calls = -1, min_calls = -1;
    std::set<double> epochs;
    bool complete = world > 0;
    for (auto& [rank, rv] : view.ranks) {
      if (rv.calls < 0) continue;
      auto s = by_rank.find(uint32_t(rank));
      if (s == by_rank.end()) {
        complete = false;
        continue;
      }
      to.insert(to.end(), s->second.begin(), s->second.end());
      ++reporting;
      max_calls = std::max(max_calls, rv.calls);
      min_calls = min_calls < 0 ? rv.calls : std::min(min_calls, rv.calls);
      epochs.insert(rv.epoch);
    }
    complete = complete && reporting == world;
    if (!complete) {
      if (!c.waiting_logged && !to.empty()) {
        std::fprintf(stderr,
                     "NCCL controller: job %s comm %s: %zu of %u ranks report tuner progress here; "
                     "not steering it until all do\n",
                     job.c_str(), comm.c_str(), reporting, world);
        c.waiting_logged = true;
      }
      continue;
    }
    c.waiting_logged = false;
    if (c.progress_max >= 0 && max_calls > c.progress_max && now_ns > c.progress_ns) {
      const double rate = (max_calls - c.progress_max) / (double(now_ns - c.progress_ns) * 1e-9);
      c.calls_per_s = c.calls_per_s > 0 ? 0.5 * c.calls_per_s + 0.5 * rate : rate;
    }
    if (max_calls != c.progress_max) {
      c.progress_max = max_calls;
      c.progress_ns = now_ns;
    }
    const uint64_t epoch_max = uint64_t(std::max(0.0, *epochs.rbegin()));
    const uint64_t epoch_min = uint64_t(std::max(0.0, *epochs.begin()));

    // ---- the dominant collective (most time) and this step's delta
    int coll = -1;
    for (const auto& [ci, t] : view.totals)
      if (coll < 0 || t.seconds > view.totals[coll].seconds) coll = ci;
    NcclObservation o;
    if (coll >= 0) {
      const NcclTotals& t = view.totals[coll];
      for (const auto& [arm, n] : t.by_arm)
        if (n > 0) o.available.push_back(arm);
      auto prev = c.previous.find(coll);
      if (c.has_previous && prev != c.previous.end()) {
        const NcclTotals& p = prev->second;
        const double dt = t.timed - p.timed, ds = t.seconds - p.seconds, dn = t.count - p.count,
                     db = t.bytes - p.bytes;
        if (dt > 0 && ds > 0 && dn > 0 && db >= 0) {
          o.collectives = uint64_t(dt);
          o.mean_seconds = ds / dt;
          o.mean_bytes = db / dn;
          // Which pairs ran this step: under a decision, all of them should be its pair.
          NcclArm forced = c.pending ? c.pending->to : c.applied;
          if (epoch_min == epoch_max && epoch_max == c.applied_epoch && !forced.isNccl()) {
            auto now_arm = t.by_arm.find(forced);
            auto was_arm = p.by_arm.find(forced);
            const double ran = (now_arm != t.by_arm.end() ? now_arm->second : 0) -
                               (was_arm != p.by_arm.end() ? was_arm->second : 0);
            o.followed = ran / dn;
          }
        }
      }
    }
    c.previous = view.totals;
    c.has_previous = true;

    // ---- a decision in flight: applied, missed, or still coming
    if (c.pending) {
      Pending& p = *c.pending;
      if (epoch_min >= p.epoch) {
        const double latency_s = double(now_ns - p.decided_ns) * 1e-9;
        ++stats_.applied;
        count(metrics::kControllerApplySeconds, {}, latency_s, now_ns);
        nlohmann::json record = pendingRecord("applied", job, comm, p.epoch, p.to, p.start_call);
        record["progress_min"] = min_calls;
        record["apply_latency_s"] = latency_s;
        log_.write(record);
        c.applied = p.to;
        c.applied_epoch = p.epoch;
        c.pending.reset();
      } else if (min_calls > double(p.start_call) || ++p.waited > config_.max_wait_steps) {
        // Some rank went past the start call without switching (or nobody moved at all).
        const bool split = epoch_max >= p.epoch;
        ++stats_.abandoned;
        count(metrics::kControllerAbandoned, {}, 1, now_ns);
        std::fprintf(stderr,
                     "NCCL controller: job %s comm %s: epoch %llu from call %llu not applied by "
                     "every rank (epochs %llu..%llu)%s\n",
                     job.c_str(), comm.c_str(), (unsigned long long)p.epoch,
                     (unsigned long long)p.start_call, (unsigned long long)epoch_min,
                     (unsigned long long)epoch_max,
                     split ? "; deciding the previous arm again for every rank" : "");
        nlohmann::json record = pendingRecord("abandoned", job, comm, p.epoch, p.to, p.start_call);
        record["epoch_min"] = epoch_min;
        record["epoch_max"] = epoch_max;
        log_.write(record);
        const Pending missed = p;  // p dies with the reset below
        const NcclArm back = missed.from;
        c.pending.reset();
        if (split) {
          // Ranks disagree: put every one of them on one arm again before NCCL hangs.
          const uint64_t epoch = std::max(epoch_max, last_epoch_sent_) + 1;
          const uint64_t lead = std::max<uint64_t>(
              config_.min_lead_calls,
              uint64_t(std::ceil(c.calls_per_s * double(config_.lead.count()) * 1e-9)));
          const uint64_t start = uint64_t(max_calls) + lead;
          ++stats_.decisions;
          count(
              metrics::kControllerDecisions,
              {{"from", ncclArmName(missed.to)}, {"to", ncclArmName(back)}, {"reason", "recover"}},
              1, now_ns);
          log_.write({{"event", "decision"},
                      {"mode", controlModeName(config_.mode)},
                      {"policy", "nccl"},
                      {"job", job},
                      {"comm", comm},
                      {"epoch", epoch},
                      {"from", "split"},
                      {"to", ncclArmName(back)},
                      {"reason", "recover"},
                      {"start_call", start},
                      {"lead_calls", lead},
                      {"wall_ns", realtimeNowNs()}});
          last_epoch_sent_ = epoch;
          c.pending = Pending{epoch, missed.to, back, start, now_ns, 0, true};
          sendDecision(c, to, epoch, start, coll, back, now_ns);
        }
      }
      continue;
    }

    // ---- what every rank runs now
    if (epoch_min != epoch_max) {
      o.consistent = false;
    } else if (epoch_max == 0) {
      o.in_force = NcclArm{};
    } else if (epoch_max == c.applied_epoch) {
      o.in_force = c.applied;
    } else {
      // A decision this controller did not make (a restart): measure it as NCCL's choice
      // until our first decision replaces it.
      o.in_force = NcclArm{};
    }
    auto kit = kernel.find(job);
    if (kit == kernel.end())
      kit = kernel.emplace(job, extractFeatures(snaps, job, now_ns, nullptr)).first;
    const Features& f = kit->second;
    const double migrations = f.migrations_per_s[0] + f.migrations_per_s[1] + f.migrations_per_s[2];
    o.host_disturbed = migrations > config_.disturbed_migrations_per_s ||
                       f.retransmits_per_s > config_.disturbed_retransmits_per_s;
    ++stats_.comms;

    NcclChoice d = c.policy.decide(o, now_ns);
    if (!d.change || coll < 0) continue;
    if (config_.mode == ControlMode::kAdvise) {
      if (c.last_advice && *c.last_advice == d.to) continue;
      c.last_advice = d.to;
    }
    const uint64_t epoch = std::max(epoch_max, last_epoch_sent_) + 1;
    const uint64_t lead = std::max<uint64_t>(
        config_.min_lead_calls,
        uint64_t(std::ceil(c.calls_per_s * double(config_.lead.count()) * 1e-9)));
    const uint64_t start = uint64_t(max_calls) + lead;
    ++stats_.decisions;
    const std::string from = ncclArmName(o.in_force), to_name = ncclArmName(d.to);
    count(metrics::kControllerDecisions, {{"from", from}, {"to", to_name}, {"reason", d.reason}}, 1,
          now_ns);
    std::fprintf(stderr, "NCCL controller: job %s comm %s %s %s -> %s from call %llu (%.*s: %s)\n",
                 job.c_str(), comm.c_str(),
                 config_.mode == ControlMode::kAdvise ? "advises" : "switches", from.c_str(),
                 to_name.c_str(), (unsigned long long)start, int(d.reason.size()), d.reason.data(),
                 d.detail.c_str());
    nlohmann::json arms = nlohmann::json::object();
    for (const NcclArm& a : o.available)
      if (c.policy.readings(a) > 0) arms[ncclArmName(a)] = c.policy.meanSeconds(a);
    if (c.policy.readings(NcclArm{}) > 0) arms["nccl"] = c.policy.meanSeconds(NcclArm{});
    log_.write({{"event", "decision"},
                {"mode", controlModeName(config_.mode)},
                {"policy", "nccl"},
                {"job", job},
                {"comm", comm},
                {"collective", std::string(kNcclCollectiveNames[coll])},
                {"epoch", config_.mode == ControlMode::kAdvise ? 0 : epoch},
                {"from", from},
                {"to", to_name},
                {"reason", d.reason},
                {"detail", d.detail},
                {"start_call", start},
                {"progress_max", max_calls},
                {"lead_calls", lead},
                {"calls_per_s", c.calls_per_s},
                {"ranks", reporting},
                {"seconds_per_collective", arms},
                {"kernel",
                 {{"migrations_per_s", migrations},
                  {"retransmits_per_s", f.retransmits_per_s},
                  {"rtt_p50_s", f.rtt_p50_s}}},
                {"wall_ns", realtimeNowNs()}});
    if (config_.mode == ControlMode::kAdvise) continue;
    last_epoch_sent_ = epoch;
    c.pending = Pending{epoch, o.in_force, d.to, start, now_ns, 0, false};
    sendDecision(c, to, epoch, start, coll, d.to, now_ns);
  }
}

}  // namespace bpftrain::collector::controller
