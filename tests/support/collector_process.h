// bpftrain-collector from the build tree as a child process on 127.0.0.1 with port 0 for both
// UDP ingest and /metrics; the ports it got are read from its "udp=... metrics=..." ready line,
// and /metrics is scraped over HTTP with deadlines. Used by the collector e2e and bpf tests.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/child_process.h"

namespace bpftrain::testing {

struct CollectorProcess {
  using Metrics = std::map<std::string, double>;

  std::unique_ptr<ChildProcess> proc;
  std::string host = "127.0.0.1";
  int udp_port = 0;  // 0 when the ready line did not come within ready_limit
  int metrics_port = 0;

  // `args` follow the binary path; pass "--listen 127.0.0.1:0 --metrics 127.0.0.1:0" in them.
  CollectorProcess(std::vector<std::string> args, std::chrono::milliseconds ready_limit) {
    args.insert(args.begin(), buildPath("collector/app/bpftrain-collector"));
    proc = std::make_unique<ChildProcess>(args);
    auto m =
        proc->waitLine(std::regex("udp=[0-9.]+:([0-9]+) metrics=[0-9.]+:([0-9]+)"), ready_limit);
    if (m) {
      udp_port = std::stoi((*m)[1]);
      metrics_port = std::stoi((*m)[2]);
    }
  }

  Metrics scrape() const { return parseMetrics(httpGet(host, metrics_port)); }

  // Polls /metrics until pred holds or the deadline passes; returns the last scrape.
  Metrics scrapeUntil(const std::function<bool(const Metrics&)>& pred,
                      std::chrono::seconds limit = std::chrono::seconds(20)) const {
    auto deadline = std::chrono::steady_clock::now() + limit;
    Metrics m = scrape();
    while (!pred(m) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      m = scrape();
    }
    return m;
  }
};

}  // namespace bpftrain::testing
