#include "collector/export/metrics_server.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <prometheus/exposer.h>
#include <sys/socket.h>

#include <algorithm>
#include <charconv>
#include <exception>

namespace bpftrain::collector::exporter {

bool splitHostPort(const std::string& host_port, std::string& host, int& port, std::string& error) {
  const std::string form =
      "expected HOST:PORT, e.g. 127.0.0.1:9471 or [::1]:9471 (port 0 picks a free port)";
  size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == host_port.size()) {
    error = "'" + host_port + "': " + form;
    return false;
  }
  host = host_port.substr(0, colon);
  if (host.front() == '[') {
    if (host.back() != ']' || host.size() < 3) {
      error = "'" + host_port + "': " + form;
      return false;
    }
    host = host.substr(1, host.size() - 2);
  }
  const char* first = host_port.data() + colon + 1;
  const char* last = host_port.data() + host_port.size();
  auto [end, ec] = std::from_chars(first, last, port);
  if (ec != std::errc() || end != last || port < 0 || port > 65535) {
    error = "'" + host_port + "': port must be a number from 0 to 65535; " + form;
    return false;
  }
  return true;
}

std::unique_ptr<MetricsServer> MetricsServer::start(const std::string& host_port,
                                                    std::string& error, size_t threads) {
  std::string host;
  int port = 0;
  if (!splitHostPort(host_port, host, port, error)) return nullptr;
  // CivetWeb wants a numeric address: resolve names ourselves so "localhost:9471" works.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), nullptr, &hints, &res); rc != 0 || !res) {
    error = "cannot resolve '" + host + "' for --metrics: " + gai_strerror(rc) +
            "; use a numeric address such as 127.0.0.1";
    return nullptr;
  }
  char numeric[INET6_ADDRSTRLEN] = {};
  const bool v6 = res->ai_family == AF_INET6;
  const void* addr =
      v6 ? static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(res->ai_addr)->sin6_addr)
         : static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr);
  inet_ntop(res->ai_family, addr, numeric, sizeof numeric);
  freeaddrinfo(res);
  const std::string bind =
      (v6 ? "[" + std::string(numeric) + "]" : std::string(numeric)) + ":" + std::to_string(port);

  std::unique_ptr<MetricsServer> server(new MetricsServer());
  try {
    server->exposer_ = std::make_unique<prometheus::Exposer>(bind, threads);
  } catch (const std::exception& e) {
    error = "cannot serve /metrics on " + bind + " (" + e.what() +
            "): the port is probably in use; pick another with --metrics HOST:PORT (port 0 picks "
            "a free one)";
    return nullptr;
  }
  std::vector<int> ports = server->exposer_->GetListeningPorts();
  if (ports.empty() || ports.front() <= 0) {
    error = "serving /metrics on " + bind + " but the bound port is unknown";
    return nullptr;
  }
  server->host_ = numeric;
  server->port_ = ports.front();
  return server;
}

MetricsServer::~MetricsServer() = default;

std::string MetricsServer::url() const {
  const bool v6 = host_.find(':') != std::string::npos;
  return "http://" + (v6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_) + "/metrics";
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
