#include "collector/export/metrics_server.h"

#include <prometheus/exposer.h>
#include <sys/socket.h>

#include <algorithm>
#include <exception>
#include <optional>

#include "common/host_port.h"

namespace bpftrain::collector::exporter {

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& host_port,
                                                    std::string& error, size_t threads) {
  // CivetWeb wants a numeric address: resolve names ourselves so "localhost:9471" works.
  std::optional<SocketAddress> addr =
      resolveSetting("--metrics", host_port, PortZero::kAllowed, SOCK_STREAM, error);
  if (!addr) return nullptr;
  const std::string bind = addr->str();

  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(bind, threads);
  } catch (const std::exception& e) {
    error = "--metrics: cannot serve /metrics on " + bind + " (" + e.what() +
            "): the port is probably in use; pick another with --metrics HOST:PORT (port 0 picks "
            "a free one)";
    return nullptr;
  }
  std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    error = "--metrics: serving /metrics on " + bind + " but the bound port is unknown";
    return nullptr;
  }
  server->host_ = addr->host();
  server->port_ = ports.front();
  return server;
}

MetricsServer::~MetricsServer() = default;

std::string MetricsServer::url() const {
  return "http://" + HostPort{host_, uint16_t(port_)}.str() + "/metrics";
}

void MetricsServer::add(std::shared_ptr<prometheus::Collectable> collectable) {
  exposer_->RegisterCollectable(collectable);
  collectables_.push_back(std::move(collectable));
}

void MetricsServer::remove(const std::shared_ptr<prometheus::Collectable>& collectable) {
  exposer_->RemoveCollectable(collectable);
  collectables_.erase(std::remove(collectables_.begin(), collectables_.end(), collectable),
                      collectables_.end());
}

}  // namespace bpftrain::collector::exporter
