// bpftrain-collector: UDP ingest -> sliding windows -> Prometheus /metrics, plus the per-step
// work (BPF probe polling, upstream forwarding, the controller) on one main-loop thread.
//
// Signals are blocked in every thread and taken synchronously with sigtimedwait in the main
// loop, which also wakes at each window-step boundary: no async-signal-safety puzzles.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "collector/app/config.h"
#include "collector/app/log.h"
#include "collector/app/privilege.h"
#include "collector/app/self_metrics.h"
#include "collector/controller/controller_service.h"
#include "collector/controller/nccl_controller.h"
#include "collector/discovery/rank_discovery.h"
#include "collector/export/metrics_server.h"
#include "collector/export/window_collectable.h"
#include "collector/ingest/sender_registry.h"
#include "collector/ingest/udp_ingest.h"
#include "collector/upstream/forwarder.h"
#include "collector/upstream/summary_codec.h"
#include "collector/window/series_store.h"
#include "common/metric_catalogue.h"
#ifdef BPFTRAIN_HAVE_LOADER
#include "collector/loader/probe_service.h"
#include "collector/loader/run_stats_keeper.h"
#endif

namespace bpftrain::collector::app {
namespace {

constexpr const char* kLog = "collector";

// Work done once per window step on the main thread, in registration order.
struct StepListener {
  const char* name;
  std::function<void(int64_t now_ns)> onStep;
};

void printDiscovery(const CollectorConfig& cfg) {
  if (cfg.discover)
    std::printf("%-20s %-4s %s, at most %zu jobs\n", "rank discovery", "on",
                "/proc/PID/environ of torchrun, mpirun, PMIx and srun ranks each step",
                cfg.discover_max_jobs);
  else
    std::printf("%-20s %-4s %s\n", "rank discovery", "off",
                "--discover finds torchrun, mpirun and srun ranks from their environment");
}

void logDiscovery(const std::vector<discovery::DiscoveryEvent>& events, size_t max_jobs) {
  static bool capped_logged = false;
  for (const auto& e : events) {
    if (e.kind == discovery::DiscoveryEvent::kRankFound)
      logf(LogLevel::kInfo, "discovery", "job %s rank %s found (%s, %zu process%s)", e.job.c_str(),
           e.rank.c_str(), e.launcher.c_str(), e.processes, e.processes == 1 ? "" : "es");
    else if (e.kind == discovery::DiscoveryEvent::kRankGone)
      logf(LogLevel::kInfo, "discovery", "job %s rank %s gone: its processes exited", e.job.c_str(),
           e.rank.c_str());
    else if (!capped_logged) {  // once; bpftrain_discovery_jobs_capped_total counts every job
      capped_logged = true;
      logf(LogLevel::kWarn, "discovery",
           "more than %zu jobs on this host: job %s (%s) and any later ones are not followed "
           "(bpftrain_discovery_jobs_capped_total; raise --discover-max-jobs)",
           max_jobs, e.job.c_str(), e.launcher.c_str());
    }
  }
}

int listProbes(const CollectorConfig& cfg) {
#ifdef BPFTRAIN_HAVE_LOADER
  for (const auto& p : loader::ProbeService::listProbes()) {
    std::string what = loader::ProbeService::describe(p.name);
    const bool off = !loader::ProbeService::offByDefault(p.name).empty() &&
                     std::find(cfg.enabled_probes.begin(), cfg.enabled_probes.end(), p.name) ==
                         cfg.enabled_probes.end();
    std::printf("%-20s %-4s %s%s%s%s\n", p.name.c_str(), p.up ? "up" : "DOWN", what.c_str(),
                p.up ? "" : "  -- ", p.reason.c_str(),
                off ? ("  -- off by default: --enable-probe " + p.name).c_str() : "");
  }
  printDiscovery(cfg);
  return 0;
#else
  std::printf(
      "this bpftrain-collector was built without BPF (configure reported why); no probes\n");
  printDiscovery(cfg);
  return 0;
#endif
}

int run(int argc, char** argv) {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGHUP);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);  // before any thread starts: all inherit it
  signal(SIGPIPE, SIG_IGN);

  CollectorConfig cfg;
  std::string error;
  if (!loadConfig(argc, argv, cfg, error)) {
    std::fprintf(stderr, "bpftrain-collector: %s\n", error.c_str());
    return 2;
  }
  if (cfg.help) {
    std::fputs(collectorUsage(), stdout);
    return 0;
  }
  if (cfg.version) {
    std::printf("bpftrain-collector %s\n", BPFTRAIN_VERSION);
    return 0;
  }
  setLogLevel(cfg.log_level);
  if (cfg.list_probes) return listProbes(cfg);
  if (cfg.list_metrics) {
    std::fputs(metrics::markdownTable().c_str(), stdout);
    return 0;
  }
  // A --user that does not exist is a mistake to name before anything starts.
  if (!cfg.user.empty() && cfg.user != "root" && !userExists(cfg.user)) {
    std::fprintf(stderr,
                 "bpftrain-collector: --user %s: no such user (create it, or --user root to stay "
                 "root)\n",
                 cfg.user.c_str());
    return 2;
  }
  // Least privilege: the defaults are loopback; listening everywhere is a choice worth a line.
  for (const auto& [flag, hp] : {std::pair{"--listen", &cfg.listen}, {"--metrics", &cfg.metrics}})
    if (isWildcardHost(hp->host))
      logf(LogLevel::kWarn, kLog,
           "%s %s listens on every interface: anyone who can reach this host can %s; bind "
           "127.0.0.1 or one interface's address unless that is intended",
           flag, hp->str().c_str(),
           std::string_view(flag) == "--listen" ? "send samples" : "read every metric");

  window::WindowConfig wc;
  wc.window = cfg.window;
  wc.step = cfg.step;
  wc.max_series = cfg.max_series;
  wc.writers = cfg.ingest_threads + 2;  // ingest threads, the probe service, the controller
  wc.series_ttl = cfg.series_ttl;
  // Outside series expire: the trainers' (the dispatcher looks ids up again after an expiry) and
  // StatsD's. The collector's own and the probes' stay: the loader caches their ids for good.
  wc.keep = [](std::string_view name) {
    const metrics::MetricDef* def = metrics::find(name);
    return def && def->source != "trainer" && def->name != metrics::kTopologyInfo.name &&
           def->name != metrics::kPinningInfo.name;
  };
  std::unique_ptr<window::SeriesStore> store = window::SeriesStore::create(wc);
  ingest::SenderRegistry registry;
  Health health;

  ingest::UdpIngestOptions io;
  io.host = cfg.listen.host;
  io.port = cfg.listen.port;
  io.threads = cfg.ingest_threads;
  io.rcvbuf_bytes = int(cfg.rcvbuf_bytes);
  // Any collector can be a parent: children's window summaries merge into this store.
  io.dispatch.summary = [](const wire::FrameView& f, window::SeriesStore& s, int writer,
                           int64_t now) { return upstream::applySummary(f, s, writer, now); };
  auto udp = ingest::UdpIngest::start(io, *store, registry, error);
  if (!udp) {
    std::fprintf(stderr, "bpftrain-collector: %s\n", error.c_str());
    return 1;
  }
  // SO_RCVBUF is doubled by the kernel for bookkeeping; below the request means rmem_max capped it.
  if (size_t(udp->rcvbufBytes()) < cfg.rcvbuf_bytes) {
    logf(LogLevel::kWarn, kLog,
         "ingest socket buffer is %d bytes, asked for %zu: bursts may be dropped (and counted in "
         "bpftrain_collector_kernel_drops_total); run as root (SO_RCVBUFFORCE) or raise "
         "net.core.rmem_max",
         udp->rcvbufBytes(), cfg.rcvbuf_bytes);
  } else {
    logf(LogLevel::kInfo, kLog, "ingest socket buffer %d bytes per socket (%s)", udp->rcvbufBytes(),
         udp->rcvbufForced() ? "SO_RCVBUFFORCE" : "SO_RCVBUF");
  }

  auto metrics = exporter::MetricsServer::start(cfg.metrics.str(), error);
  if (!metrics) {
    std::fprintf(stderr, "bpftrain-collector: %s\n", error.c_str());  // names --metrics itself
    return 1;
  }
  auto self =
      std::make_shared<SelfMetrics>(*udp, registry, health, cfg.max_series, cfg.rcvbuf_bytes);
  metrics->add(self);
  metrics->add(std::make_shared<exporter::WindowCollectable>(*store));

  std::vector<StepListener> listeners;
  int64_t tick_ns = 0;  // the controller's look between steps (0: none)
  if (cfg.series_ttl.count() > 0) {
    listeners.push_back({"expiry", [&](int64_t now) {
                           if (size_t n = store->expireIdle(now))
                             logf(LogLevel::kDebug, kLog, "%zu idle series expired", n);
                           // Senders too, at 30 s at least: ten of a live rank's hello periods.
                           const int64_t idle =
                               std::max<int64_t>(cfg.series_ttl.count(), 30'000'000'000);
                           if (size_t n = registry.expireIdle(now - idle))
                             logf(LogLevel::kDebug, kLog, "%zu idle senders forgotten", n);
                         }});
  }

  // Rank discovery runs on this thread before the probes' step, so a rank found this step is
  // traced from this step on; it writes its own metrics with the probe service's writer index.
  std::unique_ptr<discovery::RankDiscovery> discovered;
  std::function<void(std::vector<discovery::DiscoveredRank>)> onDiscovered;
  std::function<void(int64_t now_ns)> drainProbeRings;  // between steps, for the controller's looks
  if (cfg.discover) {
    discovery::DiscoveryOptions dopt;
    dopt.max_jobs = cfg.discover_max_jobs;
    discovered = std::make_unique<discovery::RankDiscovery>(dopt, store.get(), cfg.ingest_threads);
    listeners.push_back({"discovery", [&](int64_t now) {
                           std::vector<discovery::DiscoveryEvent> events;
                           if (discovered->scan(now, &events) && onDiscovered)
                             onDiscovered(discovered->ranks());
                           logDiscovery(events, cfg.discover_max_jobs);
                         }});
    logf(LogLevel::kInfo, "discovery",
         "rank discovery on: torchrun, mpirun, PMIx and srun ranks from /proc/PID/environ every "
         "step, at most %zu jobs",
         cfg.discover_max_jobs);
  }

#ifdef BPFTRAIN_HAVE_LOADER
  std::unique_ptr<loader::ProbeService> probes;
  if (!cfg.no_bpf) {
    loader::ProbeOptions po;
    po.all_processes = cfg.all_processes;
    po.rdma_sources = cfg.rdma_sources_all ? loader::RdmaSources::kAll : loader::RdmaSources::kAuto;
    po.rdma_rxe_kprobes = cfg.rdma_rxe_kprobes;
    po.rdma_verbs_nonfaulting = cfg.rdma_verbs_nonfaulting;
    po.pids = cfg.pids;
    po.cgroups = cfg.cgroups;
    po.disabled = {cfg.disabled_probes.begin(), cfg.disabled_probes.end()};
    po.enabled = {cfg.enabled_probes.begin(), cfg.enabled_probes.end()};
    po.run_stats.mode =
        loader::kRunStatsModeNames.parse(cfg.probe_run_stats).value_or(loader::RunStatsMode::kOff);
    probes = loader::ProbeService::create(po, *store, cfg.ingest_threads, error);
    if (!probes) {
      logf(LogLevel::kWarn, "bpf",
           "%s; running without kernel probes "
           "(bpftrain_collector_feature_enabled{feature=\"bpf\"} = 0; --no-bpf silences this)",
           error.c_str());
    } else {
      health.bpf_enabled = 1;
      for (const auto& s : probes->status()) {
        if (!s.up)
          logf(s.left_out ? LogLevel::kInfo : LogLevel::kWarn, "bpf", "probe %s is %s: %s",
               s.name.c_str(), s.left_out ? "left out" : "down", s.reason.c_str());
      }
      listeners.push_back({"bpf", [&](int64_t now) { probes->poll(registry, now); }});
      onDiscovered = [&](std::vector<discovery::DiscoveredRank> ranks) {
        probes->setDiscovered(std::move(ranks));
      };
      drainProbeRings = [&](int64_t now) { probes->drainRings(now); };
    }
  }
#else
  if (!cfg.no_bpf) {
    logf(LogLevel::kWarn, "bpf",
         "built without BPF support: no kernel probes "
         "(bpftrain_collector_feature_enabled{feature=\"bpf\"} = 0)");
  }
#endif

  if (discovered && !onDiscovered)
    logf(LogLevel::kWarn, "discovery",
         "without kernel probes --discover only counts the ranks it finds "
         "(bpftrain_discovery_ranks); their kernel signals are not traced");

  // The forwarder runs its own thread, sending each step once it has ended.
  std::unique_ptr<upstream::UpstreamForwarder> forwarder;
  std::shared_ptr<prometheus::Collectable> forwarder_metrics;
  auto startUpstream = [&](const std::optional<HostPort>& to) {
    if (forwarder) forwarder->stop();
    if (forwarder_metrics) metrics->remove(forwarder_metrics);
    forwarder.reset();
    forwarder_metrics.reset();
    health.upstream_enabled = 0;
    if (!to) return;
    std::string err;
    upstream::UpstreamOptions uo;
    uo.target = to->str();
    forwarder = upstream::UpstreamForwarder::create(*store, uo, err);
    if (!forwarder) {
      logf(LogLevel::kError, "upstream",
           "--upstream %s: %s; not forwarding "
           "(bpftrain_collector_feature_enabled{feature=\"upstream\"} = 0)",
           to->str().c_str(), err.c_str());
      return;
    }
    forwarder_metrics = forwarder->collectable();
    metrics->add(forwarder_metrics);
    forwarder->start();
    health.upstream_enabled = 1;
    logf(LogLevel::kInfo, "upstream", "forwarding window summaries to %s", to->str().c_str());
  };
  startUpstream(cfg.upstream);

  // The controller reads the windows each step and steers the trainer through its control port.
  std::unique_ptr<controller::ControllerService> steering;
  if (cfg.control) {
    controller::ControllerConfig cc;
    cc.policy = cfg.policy;
    cc.mode = *controller::parseControlMode(cfg.control_mode);
    cc.trainer_address = cfg.trainer.str();
    cc.secret_file = cfg.secret_path;
    cc.job = cfg.job;
    cc.decisions_log = cfg.decisions_log;
    cc.features_log = cfg.features_log;
    cc.features_log_every = cfg.features_log_every;
    cc.window = cfg.controller_window;
    cc.react_window = cfg.controller_react_window;
    cc.writer = cfg.ingest_threads + 1;
    steering = controller::ControllerService::create(cc, store.get(), error);
    if (!steering) {
      std::fprintf(stderr, "bpftrain-collector: --control: %s\n", error.c_str());
      return 2;
    }
    health.controller_enabled = 1;
    logf(LogLevel::kInfo, "controller", "policy %s, mode %s, trainer control %s%s%s",
         cfg.policy.c_str(), cfg.control_mode.c_str(), cfg.trainer.str().c_str(),
         cfg.decisions_log.empty() ? "" : ", decisions log ", cfg.decisions_log.c_str());
    listeners.push_back({"controller", [&](int64_t now) { steering->onStep(*store, now); }});
    // Between steps too: a decision that just misses a step waits a whole training step at the
    // trainer's boundary (1.4 s on netlab's throttled ring), so a decisive one goes out at once.
    if (cfg.controller_period.count() > 0 && cfg.controller_period < cfg.step)
      tick_ns = cfg.controller_period.count();
  }

  // The NCCL controller answers each plugin rank at its hello's address, from the ingest port.
  std::unique_ptr<controller::NcclController> nccl_steering;
  std::vector<controller::NcclSender> nccl_senders;
  uint64_t nccl_senders_version = ~uint64_t(0);
  if (cfg.nccl_control) {
    controller::NcclControllerConfig nc;
    nc.mode = *controller::parseControlMode(cfg.control_mode);
    nc.secret_file = cfg.secret_path;
    nc.job = cfg.job;
    nc.decisions_log = cfg.decisions_log;
    nc.writer = cfg.ingest_threads + 1;  // the main thread's writer, shared with --control
    nccl_steering = controller::NcclController::create(
        nc, store.get(),
        [&udp](const SocketAddress& to, std::span<const uint8_t> d, std::string& err) {
          return udp->sendTo(to, d, err);
        },
        error);
    if (!nccl_steering) {
      std::fprintf(stderr, "bpftrain-collector: --nccl-control: %s\n", error.c_str());
      return 2;
    }
    health.controller_enabled = 1;
    logf(LogLevel::kInfo, "controller", "NCCL controller on, mode %s%s%s", cfg.control_mode.c_str(),
         cfg.decisions_log.empty() ? "" : ", decisions log ", cfg.decisions_log.c_str());
    listeners.push_back({"nccl-controller", [&](int64_t now) {
                           if (const uint64_t v = registry.version(); v != nccl_senders_version) {
                             nccl_senders_version = v;
                             nccl_senders.clear();
                             for (const ingest::Sender& s : registry.snapshot())
                               if (s.nccl)
                                 nccl_senders.push_back({s.job, s.rank, s.world, s.address});
                           }
                           nccl_steering->onStep(*store, nccl_senders, now);
                         }});
  }

  // Least privilege (privilege.h): sockets, probes and log files are set up, so give up root
  // and keep only the capabilities the probes still use.
  {
    bool probes_up = false;
#ifdef BPFTRAIN_HAVE_LOADER
    probes_up = probes != nullptr;
#endif
    std::string user = cfg.user.empty() && userExists("bpftrain") ? "bpftrain" : cfg.user;
    if (user == "root" || (user.empty() && geteuid() == 0)) {
      if (geteuid() == 0)
        logf(LogLevel::kInfo, kLog,
             "running as root (%s): --user NAME (or a bpftrain user) drops to that user after "
             "start-up",
             user.empty() ? "no bpftrain user" : "--user root");
    } else {
#ifdef BPFTRAIN_HAVE_LOADER
      // Sampled run statistics are switched on and off for the collector's whole life, which
      // needs CAP_SYS_ADMIN: a keeper process holds that capability alone.
      unsigned uid = getuid(), gid = getgid();
      if (!user.empty() && geteuid() == 0) (void)userIds(user, uid, gid);  // checked by the drop
      if (probes && cfg.probe_run_stats == "sampled") {
        if (auto keeper = loader::RunStatsKeeper::start(uid, gid, error)) {
          logf(LogLevel::kInfo, kLog,
               "run-statistics keeper pid %d keeps CAP_SYS_ADMIN alone, to switch sampled BPF run "
               "statistics (--probe-run-stats on|off needs none)",
               int(keeper->pid()));
          probes->useRunStatsSwitch(std::move(keeper));
        } else {
          logf(LogLevel::kWarn, kLog,
               "%s: probe run time not exported (bpftrain_probe_run_stats_measured_ratio 0)",
               error.c_str());
          probes->useRunStatsSwitch(nullptr);  // off, rather than a refused switch every period
        }
      }
#endif
      PrivilegeDrop drop;
      if (geteuid() != 0) user.clear();  // not root: reduce the capabilities only
      std::vector<int> keep = probes_up ? capabilitiesForProbes() : std::vector<int>{};
      if (cfg.discover)  // ranks of other users: their /proc/PID/environ
        for (int cap : capabilitiesForDiscovery())
          if (std::find(keep.begin(), keep.end(), cap) == keep.end()) keep.push_back(cap);
      if (!dropPrivileges(user, keep, drop, error)) {
        std::fprintf(stderr, "bpftrain-collector: %s\n", error.c_str());
        return 1;
      }
      logf(LogLevel::kInfo, kLog, "running as uid %u gid %u%s%s, capabilities kept: %s",
           unsigned(getuid()), unsigned(getgid()), drop.dropped_user ? ", user " : "",
           drop.dropped_user ? user.c_str() : "", drop.kept.c_str());
    }
  }

  // Tests and scripts parse this line for the bound ports (--listen/--metrics with port 0).
  // HostPort::str() brackets an IPv6 host, so "[::1]:PORT" parses back with the same grammar.
  std::printf("bpftrain-collector: listening udp=%s metrics=%s threads=%d window=%" PRId64
              "ms step=%" PRId64 "ms\n",
              HostPort{cfg.listen.host, uint16_t(udp->port())}.str().c_str(),
              HostPort{cfg.metrics.host, uint16_t(metrics->port())}.str().c_str(), udp->threads(),
              int64_t(cfg.window.count() / 1'000'000), int64_t(cfg.step.count() / 1'000'000));
  std::fflush(stdout);

  const int64_t step_ns = cfg.step.count();
  int64_t next_step = (window::monotonicNowNs() / step_ns + 1) * step_ns;
  int64_t next_tick = tick_ns > 0 ? window::monotonicNowNs() + tick_ns : INT64_MAX;
  for (;;) {
    int64_t now = window::monotonicNowNs();
    if (now >= next_tick && now < next_step) {
      if (drainProbeRings) drainProbeRings(now);  // fresh RTT samples for the look
      steering->onTick(*store, now);
      next_tick = std::max(next_tick, window::monotonicNowNs()) + tick_ns;  // no catching up
      continue;
    }
    if (now >= next_step) {
      if (tick_ns > 0) next_tick = now + tick_ns;  // the step itself is a look
      for (auto& l : listeners) l.onStep(now);
      health.steps.fetch_add(1);
      int64_t after = window::monotonicNowNs();
      next_step += step_ns;
      if (after >= next_step) {  // listeners overran: skip missed steps rather than pile up
        health.step_overruns.fetch_add(1);
        logf(LogLevel::kDebug, kLog, "step work took %" PRId64 "ms, longer than a step",
             (after - now) / 1'000'000);
        next_step = (after / step_ns + 1) * step_ns;
      }
      continue;
    }
    int64_t wait = std::min(next_step, next_tick) - now;
    timespec ts{time_t(wait / 1'000'000'000), long(wait % 1'000'000'000)};
    int sig = sigtimedwait(&signals, nullptr, &ts);
    if (sig < 0) continue;  // timeout (EAGAIN) or EINTR
    if (sig == SIGTERM || sig == SIGINT) {
      logf(LogLevel::kInfo, kLog, "%s: stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
      break;
    }
    // SIGHUP: re-read the same flags and file; apply what can change live, name the rest.
    CollectorConfig fresh;
    if (!loadConfig(argc, argv, fresh, error)) {
      health.reload_failures.fetch_add(1);
      logf(LogLevel::kError, kLog, "SIGHUP: reload failed, keeping the running config: %s",
           error.c_str());
      continue;
    }
    std::string applied, restart;
    auto note = [](std::string& list, const char* what) {
      list += (list.empty() ? "" : ", ") + std::string(what);
    };
    if (fresh.log_level != cfg.log_level) {
      setLogLevel(fresh.log_level);
      note(applied, "log_level");
    }
    if (fresh.upstream != cfg.upstream) {
      startUpstream(fresh.upstream);
      note(applied, "upstream");
    }
    if (fresh.max_series != cfg.max_series) note(restart, "max_series");
    if (fresh.user != cfg.user) note(restart, "user");
    if (fresh.series_ttl != cfg.series_ttl) note(restart, "series_ttl");
    if (fresh.listen != cfg.listen) note(restart, "listen");
    if (fresh.metrics != cfg.metrics) note(restart, "metrics");
    if (fresh.window != cfg.window || fresh.step != cfg.step) note(restart, "window/step");
    if (fresh.ingest_threads != cfg.ingest_threads) note(restart, "ingest_threads");
    if (fresh.rcvbuf_bytes != cfg.rcvbuf_bytes) note(restart, "rcvbuf");
    if (fresh.no_bpf != cfg.no_bpf || fresh.pids != cfg.pids || fresh.cgroups != cfg.cgroups ||
        fresh.all_processes != cfg.all_processes ||
        fresh.rdma_sources_all != cfg.rdma_sources_all ||
        fresh.rdma_rxe_kprobes != cfg.rdma_rxe_kprobes ||
        fresh.rdma_verbs_nonfaulting != cfg.rdma_verbs_nonfaulting)
      note(restart, "bpf targets");
    if (fresh.discover != cfg.discover || fresh.discover_max_jobs != cfg.discover_max_jobs)
      note(restart, "discovery");
    if (fresh.control != cfg.control || fresh.nccl_control != cfg.nccl_control ||
        fresh.policy != cfg.policy || fresh.secret_path != cfg.secret_path ||
        fresh.control_mode != cfg.control_mode || fresh.trainer != cfg.trainer ||
        fresh.job != cfg.job)
      note(restart, "controller");
    // Keep what needs a restart as it runs, so a second SIGHUP reports it again.
    cfg.log_level = fresh.log_level;
    cfg.upstream = fresh.upstream;
    health.reloads.fetch_add(1);
    logf(LogLevel::kInfo, kLog, "SIGHUP: reloaded %s; applied: %s; needs a restart: %s",
         cfg.config_path.empty() ? "flags (no --config file)" : cfg.config_path.c_str(),
         applied.empty() ? "nothing" : applied.c_str(),
         restart.empty() ? "nothing" : restart.c_str());
  }

  listeners.clear();
  if (forwarder) forwarder->stop();
  udp->stop();  // joins the ingest threads, then the sockets close with *udp
  logf(LogLevel::kInfo, kLog, "stopped");
  return 0;
}

}  // namespace
}  // namespace bpftrain::collector::app

int main(int argc, char** argv) { return bpftrain::collector::app::run(argc, argv); }
