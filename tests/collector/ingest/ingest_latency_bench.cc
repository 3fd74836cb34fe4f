// 10,000 simulated workers at 10 Hz into an in-process ingest + real window store: loss (sent by
// bpftrain-loadgen vs counted) and the latency from a sample's arrival to its visibility in a
// window query. A probe thread sends one StatsD gauge every 5 ms with a fresh value and polls
// SeriesStore::snapshotOne() until the value shows; the time from sendto() to visible bounds
// arrival->visible from above (it includes the loopback hop).
// Usage: ingest_latency_bench [--workers 10000] [--hz 10] [--seconds 10] [--loadgen PATH]
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "collector/ingest/udp_ingest.h"
#include "collector/window/series_store.h"

using namespace bpftrain::collector;
using Clock = std::chrono::steady_clock;

// Scheduler accounting of this process's ingest threads (/proc/self/task/*/schedstat: on-CPU ns,
// runqueue wait ns, timeslices): how long they sat runnable waiting for a CPU, which on a shared
// 2-core machine is what the latency tail is made of.
struct SchedStat {
  uint64_t run_ns = 0, wait_ns = 0, slices = 0;
};
SchedStat ingestSchedStat() {
  SchedStat total;
  for (const auto& task : std::filesystem::directory_iterator("/proc/self/task")) {
    std::ifstream comm(task.path() / "comm");
    std::string name;
    std::getline(comm, name);
    if (name.rfind("ingest-", 0) != 0) continue;
    std::ifstream stat(task.path() / "schedstat");
    SchedStat s;
    stat >> s.run_ns >> s.wait_ns >> s.slices;
    total.run_ns += s.run_ns;
    total.wait_ns += s.wait_ns;
    total.slices += s.slices;
  }
  return total;
}

int main(int argc, char** argv) {
  int workers = 10000;
  double hz = 10, seconds = 10;
  const char* build = std::getenv("BPFTRAIN_BUILD_DIR");
  std::string loadgen = std::string(build ? build : ".") + "/collector/app/bpftrain-loadgen";
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--workers")
      workers = std::atoi(argv[i + 1]);
    else if (a == "--hz")
      hz = std::atof(argv[i + 1]);
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (a == "--loadgen")
      loadgen = argv[i + 1];
  }

  window::WindowConfig wc;
  wc.writers = 2;
  auto store = window::SeriesStore::create(wc);
  ingest::SenderRegistry registry;
  ingest::UdpIngestOptions opt;
  opt.port = 0;
  opt.threads = 2;
  std::string error;
  auto in = ingest::UdpIngest::start(opt, *store, registry, error);
  if (!in) {
    std::fprintf(stderr, "ingest_latency_bench: %s\n", error.c_str());
    return 1;
  }

  // The probe series exists before the load starts, so the probe measures record->visible only.
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in dst{};
  dst.sin_family = AF_INET;
  dst.sin_port = htons(in->port());
  inet_pton(AF_INET, "127.0.0.1", &dst.sin_addr);
  connect(fd, reinterpret_cast<sockaddr*>(&dst), sizeof dst);
  auto send = [&](long v) {
    char b[64];
    int n = std::snprintf(b, sizeof b, "bench.probe:%ld|g", v);
    return ::send(fd, b, size_t(n), 0) == n;
  };
  send(0);
  window::SeriesId probe = window::kRejectedSeries;
  for (auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(5);) {
    probe = store->lookup("bench_probe", {}, window::SeriesKind::kGauge);
    if (store->snapshotOne(probe, window::monotonicNowNs()).count > 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }

  std::atomic<bool> done{false};
  std::vector<double> latencies_us;
  uint64_t probe_timeouts = 0;
  std::thread prober([&] {
    long v = 1;
    while (!done.load()) {
      auto t0 = Clock::now();
      if (!send(v)) continue;
      bool seen = false;
      while (Clock::now() - t0 < std::chrono::seconds(1)) {
        if (store->snapshotOne(probe, window::monotonicNowNs()).last == double(v)) {
          seen = true;
          break;
        }
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      }
      if (seen)
        latencies_us.push_back(
            std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      else
        ++probe_timeouts;
      ++v;
      std::this_thread::sleep_until(t0 + std::chrono::milliseconds(5));
    }
  });

  std::string cmd = loadgen + " --target 127.0.0.1:" + std::to_string(in->port()) +
                    " --protocol binary --workers " + std::to_string(workers) + " --hz " +
                    std::to_string(hz) + " --per-datagram 3 --sockets 64 --duration " +
                    std::to_string(seconds);
  SchedStat sched0 = ingestSchedStat();
  auto wall0 = Clock::now();
  FILE* p = popen(cmd.c_str(), "r");
  char line[8192] = {};
  std::string last;
  while (p && std::fgets(line, sizeof line, p)) last = line;
  int rc = p ? pclose(p) : -1;
  SchedStat sched1 = ingestSchedStat();
  double wall_s = std::chrono::duration<double>(Clock::now() - wall0).count();
  done = true;
  prober.join();
  if (rc != 0 || last.empty()) {
    std::fprintf(stderr, "ingest_latency_bench: loadgen failed (%s)\n", cmd.c_str());
    return 1;
  }
  auto sent = nlohmann::json::parse(last);
  uint64_t want = sent["samples"];
  auto counted = [&] {
    ingest::IngestTotals t;
    for (const auto& s : in->stats()) t.add(*s);
    return t;
  };
  for (auto t0 = Clock::now(); Clock::now() - t0 < std::chrono::seconds(5);) {
    if (counted().samples[size_t(ingest::Protocol::kBinary)] >= want) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ingest::IngestTotals t = counted();
  in->stop();
  close(fd);

  std::sort(latencies_us.begin(), latencies_us.end());
  auto pct = [&](double q) {
    return latencies_us.empty() ? 0.0 : latencies_us[size_t(q * double(latencies_us.size() - 1))];
  };
  uint64_t got = t.samples[size_t(ingest::Protocol::kBinary)];
  std::printf("ingest latency: %d workers x %.0f Hz for %.0f s (binary frames, 3 samples each)\n",
              workers, hz, seconds);
  std::printf("  %-34s %12s\n", "samples sent (loadgen)", std::to_string(want).c_str());
  std::printf("  %-34s %12s\n", "samples counted", std::to_string(got).c_str());
  std::printf("  %-34s %12s\n", "lost (sent - counted)",
              std::to_string(int64_t(want - got)).c_str());
  std::printf("  %-34s %12s\n", "kernel drops (SO_RXQ_OVFL)",
              std::to_string(t.kernel_drops).c_str());
  std::printf("  %-34s %12s\n", "sequence gaps", std::to_string(t.frames_lost).c_str());
  std::printf("  %-34s %12zu\n", "latency probes", latencies_us.size());
  std::printf("  %-34s %12.1f\n", "arrival->visible p50 (us)", pct(0.5));
  std::printf("  %-34s %12.1f\n", "arrival->visible p99 (us)", pct(0.99));
  std::printf("  %-34s %12.1f\n", "arrival->visible max (us)",
              latencies_us.empty() ? 0.0 : latencies_us.back());
  std::printf("  %-34s %12llu\n", "probes not visible within 1 s",
              (unsigned long long)probe_timeouts);
  uint64_t slices = sched1.slices - sched0.slices;
  double wait_ms = double(sched1.wait_ns - sched0.wait_ns) / 1e6;
  std::printf("  %-34s %12.1f\n", "ingest threads on CPU (% of a core)",
              100.0 * double(sched1.run_ns - sched0.run_ns) / 1e9 / wall_s);
  std::printf("  %-34s %12.1f\n", "ingest threads runnable, no CPU (ms)", wait_ms);
  std::printf("  %-34s %12.1f\n", "  mean wait per wake-up (us)",
              slices ? 1000.0 * wait_ms / double(slices) : 0.0);
  std::printf("  (load average now: ");
  if (FILE* la = std::fopen("/proc/loadavg", "r")) {
    char buf[64] = {};
    if (std::fgets(buf, sizeof buf, la)) std::printf("%.14s", buf);
    std::fclose(la);
  }
  std::printf("; waits for a CPU are the machine's other load, not ingest work)\n");
  nlohmann::json j = {{"workers", workers},
                      {"hz", hz},
                      {"sent", want},
                      {"counted", got},
                      {"kernel_drops", t.kernel_drops},
                      {"p50_us", pct(0.5)},
                      {"p99_us", pct(0.99)},
                      {"probes", latencies_us.size()},
                      {"probe_timeouts", probe_timeouts},
                      {"runqueue_wait_ms", wait_ms},
                      {"loadgen_samples_per_second", sent["samples_per_second"]}};
  std::printf("%s\n", j.dump().c_str());
  return got == want && probe_timeouts == 0 ? 0 : 3;
}
