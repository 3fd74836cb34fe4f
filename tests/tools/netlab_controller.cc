// netlab-controller: the collector's ingest, windows and controller without the rest of the
// daemon, for measuring adaptive runs in netlab (tools/netlab.d/measure) before and apart from
// bpftrain-collector's --control wiring. Receives trainer telemetry on --listen, keeps 5 s / 500 ms
// windows, and runs ControllerService every step.
//   netlab-controller --listen ADDR:PORT --control ADDR:PORT --secret FILE --policy rules|bandit
//       [--mode act|advise] [--job NAME] [--decisions FILE] [--features FILE] [--seconds S] [--bpf]
// --features writes the job's features every step as JSON lines (threshold calibration).
// --bpf also runs the BPF probes (transport queue depth, RTT, migrations...) for the registered
// training processes, as the collector does, so the rules policy sees transport signals.
#include <signal.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>

#include "collector/controller/controller_service.h"
#include "collector/ingest/sender_registry.h"
#include "collector/ingest/udp_ingest.h"
#include "collector/window/series_store.h"
#ifdef BPFTRAIN_HAVE_LOADER
#include "collector/loader/probe_service.h"
#endif

namespace {
volatile sig_atomic_t g_stop = 0;
void onSignal(int) { g_stop = 1; }
}  // namespace

int main(int argc, char** argv) {
  using namespace bpftrain::collector;
  std::string listen = "127.0.0.1:0";
  double seconds = 0;
  controller::ControllerConfig cc;
  bool bpf = false;
  std::string features_path;
  for (int i = 1; i < argc; i += 2) {
    std::string f = argv[i];
    if (f == "--bpf") {
      bpf = true;
      --i;
      continue;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "netlab-controller: %s needs a value\n", f.c_str());
      return 2;
    }
    std::string v = argv[i + 1];
    if (f == "--listen") listen = v;
    else if (f == "--control") cc.trainer_address = v;
    else if (f == "--secret") cc.secret_file = v;
    else if (f == "--policy") cc.policy = v;
    else if (f == "--job") cc.job = v;
    else if (f == "--decisions") cc.decisions_log = v;
    else if (f == "--seconds") seconds = std::atof(v.c_str());
    else if (f == "--features") features_path = v;
    else if (f == "--mode") {
      auto m = controller::parseControlMode(v);
      if (!m) {
        std::fprintf(stderr, "netlab-controller: --mode act|advise\n");
        return 2;
      }
      cc.mode = *m;
    } else {
      std::fprintf(stderr, "netlab-controller: unknown flag %s\n", f.c_str());
      return 2;
    }
  }
  window::WindowConfig wc;
  wc.writers = 3;  // ingest thread 0, controller 1, probes 2
  auto store = window::SeriesStore::create(wc);
  ingest::SenderRegistry registry;
  ingest::UdpIngestOptions io;
  size_t colon = listen.rfind(':');
  io.host = listen.substr(0, colon);
  io.port = uint16_t(std::atoi(listen.c_str() + colon + 1));
  io.threads = 1;
  std::string error;
  auto udp = ingest::UdpIngest::start(io, *store, registry, error);
  if (!udp) {
    std::fprintf(stderr, "netlab-controller: %s\n", error.c_str());
    return 1;
  }
  cc.writer = 1;
  auto svc = controller::ControllerService::create(cc, store.get(), error);
  if (!svc) {
    std::fprintf(stderr, "%s\n", error.c_str());
    return 2;
  }
#ifdef BPFTRAIN_HAVE_LOADER
  std::unique_ptr<loader::ProbeService> probes;
  if (bpf) {
    probes = loader::ProbeService::create({}, *store, 2, error);
    if (!probes) std::fprintf(stderr, "netlab-controller: no BPF probes: %s\n", error.c_str());
  }
#else
  if (bpf) std::fprintf(stderr, "netlab-controller: built without the BPF loader; --bpf ignored\n");
#endif
  std::printf("{\"listening\": %u, \"policy\": \"%s\"}\n", udp->port(), cc.policy.c_str());
  std::fflush(stdout);
  signal(SIGTERM, onSignal);
  signal(SIGINT, onSignal);
  std::FILE* features = features_path.empty() ? nullptr : std::fopen(features_path.c_str(), "w");
  auto start = std::chrono::steady_clock::now();
  auto next = start;
  while (!g_stop) {
    next += wc.step;
    std::this_thread::sleep_until(next);  // the window step is the controller's clock
#ifdef BPFTRAIN_HAVE_LOADER
    if (probes) probes->poll(registry, window::monotonicNowNs());
#endif
    svc->onStep(*store, window::monotonicNowNs());
    if (features != nullptr && svc->lastFeatures().has_steps) {
      nlohmann::json j = controller::featuresJson(svc->lastFeatures());
      j["wall_ns"] = controller::wallClockNs();
      std::fprintf(features, "%s\n", j.dump().c_str());
      std::fflush(features);
    }
    if (seconds > 0 && std::chrono::steady_clock::now() - start > std::chrono::duration<double>(seconds))
      break;
  }
  if (features != nullptr) std::fclose(features);
  const auto& s = svc->stats();
  std::printf("{\"decisions\": %llu, \"sends\": %llu, \"applied\": %llu, \"abandoned\": %llu}\n",
              (unsigned long long)s.decisions, (unsigned long long)s.sends,
              (unsigned long long)s.applied, (unsigned long long)s.abandoned);
  return 0;
}
