// The /metrics HTTP endpoint: a prometheus::Exposer bound to HOST:PORT (port 0 picks a free
// port, reported by port()), serving the window collectable and any extra collectables the app
// registers (its self-metrics).
#pragma once

#include <prometheus/collectable.h>

#include <memory>
#include <string>
#include <vector>

namespace prometheus {
class Exposer;
}

namespace bpftrain::collector::exporter {

class MetricsServer {
 public:
  // Binds HOST:PORT, [IPV6]:PORT or NAME:PORT (common/host_port.h). On failure returns null and
  // sets `error` to one line naming the fix.
  static std::unique_ptr<MetricsServer> start(const std::string& host_port, std::string& error,
                                              size_t threads = 2);
  ~MetricsServer();

  int port() const { return port_; }
  const std::string& host() const { return host_; }
  std::string url() const;  // http://HOST:PORT/metrics

  // Serves `collectable` on /metrics from now on; the server keeps it alive.
  void add(std::shared_ptr<prometheus::Collectable> collectable);
  void remove(const std::shared_ptr<prometheus::Collectable>& collectable);

 private:
  MetricsServer() = default;

  std::unique_ptr<prometheus::Exposer> exposer_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::string host_;
  int port_ = 0;
};

}  // namespace bpftrain::collector::exporter
