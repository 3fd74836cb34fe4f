#include "trainer/collective/rendezvous.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#define HIREDIS_NESTED_INCLUDE 1
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/ibverbs/device.h>
#include <gloo/transport/tcp/device.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/host_port.h"

namespace bpftrain::trainer::collective {
namespace {

std::string seconds(std::chrono::milliseconds t) {
  if (t.count() % 1000 == 0) return std::to_string(t.count() / 1000) + "s";
  return std::to_string(t.count()) + "ms";
}

// Gloo's FileStore::wait and RedisStore::wait compare the elapsed time in whole seconds (a 700 ms
// timeout waits 1 s, every later key another second), so we poll their check() ourselves.
class CheckableFileStore : public gloo::rendezvous::FileStore {
 public:
  using FileStore::FileStore;
  bool has(const std::string& key) { return check({key}); }
};

bool storeHas(gloo::rendezvous::Store& store, const std::string& key) {
  if (auto* f = dynamic_cast<CheckableFileStore*>(&store)) return f->has(key);
  if (auto* r = dynamic_cast<gloo::rendezvous::RedisStore*>(&store)) return r->check({key});
  try {  // other stores: their own wait, with its own granularity
    store.wait({key}, std::chrono::milliseconds(1));
    return true;
  } catch (const gloo::Exception&) {
    return false;
  }
}

// HOST:PORT (common/host_port.h) that is not an existing directory: a redis-server.
bool isRedisSpec(const std::string& spec, std::string* host, int* port) {
  std::string not_an_address;
  std::optional<HostPort> hp = parseHostPort(spec, PortZero::kRejected, not_an_address);
  std::error_code ec;
  if (!hp || std::filesystem::is_directory(spec, ec)) return false;
  *host = hp->host;
  *port = hp->port;
  return true;
}

}  // namespace

std::unique_ptr<gloo::rendezvous::Store> openStore(const std::string& spec) {
  if (spec.empty())
    throw std::runtime_error(
        "no rendezvous store: pass --store DIR (a directory all ranks can reach) or --store "
        "HOST:PORT (a redis-server)");
  std::string host;
  int port = 0;
  if (isRedisSpec(spec, &host, &port)) {
    try {
      return std::make_unique<gloo::rendezvous::RedisStore>(host, port);
    } catch (const std::exception& e) {
      throw std::runtime_error("cannot reach redis store " + spec + " (" + e.what() +
                               "): start redis-server there or pass --store DIR");
    }
  }
  std::error_code ec;
  std::filesystem::create_directories(spec, ec);
  if (!std::filesystem::is_directory(spec, ec))
    throw std::runtime_error("rendezvous store " + spec +
                             " is not a directory and cannot be created: pass a writable "
                             "directory (or HOST:PORT of a redis-server)");
  return std::make_unique<CheckableFileStore>(spec);
}

void joinStore(gloo::rendezvous::Store& store, const std::string& store_name,
               const std::string& prefix, int rank, int world, std::chrono::milliseconds timeout) {
  auto key = [&](int r) { return prefix + "/join/" + std::to_string(r); };
  const std::string me = std::to_string(rank);
  try {
    store.set(key(rank), std::vector<char>(me.begin(), me.end()));
  } catch (const std::exception& e) {
    // Gloo's stores refuse to overwrite a key: this one is left from an earlier run.
    throw std::runtime_error("rank " + me + ": store " + store_name + " already holds keys for " +
                             "prefix " + prefix + " (an earlier run?): use a fresh directory or " +
                             "a different job name/prefix (" + e.what() + ")");
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::vector<int> missing;
  for (int r = 0; r < world; ++r) {
    while (!storeHas(store, key(r))) {
      if (std::chrono::steady_clock::now() >= deadline) {
        missing.push_back(r);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a store: no events
    }
  }
  if (missing.empty()) return;
  std::string who = missing.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < missing.size(); ++i) {
    // Appending in place: `const char* + std::string&&` inlines to a memcpy whose bounds GCC 12
    // cannot prove (-Wrestrict false positive, GCC PR105329) and builds a temporary anyway.
    if (i > 0) who += ',';
    who += std::to_string(missing[i]);
  }
  throw std::runtime_error(who + " of " + std::to_string(world) + " did not join store " +
                           store_name + " (prefix " + prefix + ") within " + seconds(timeout) +
                           " (this is rank " + std::to_string(rank) +
                           "): start every rank with the same --store, --world and prefix, "
                           "or raise the timeout");
}

std::shared_ptr<gloo::transport::Device> makeTcpDevice(const std::string& bind_address) {
  gloo::transport::tcp::attr attr;
  const std::string where = bind_address.empty() ? "127.0.0.1" : bind_address;
  std::error_code ec;
  if (!bind_address.empty() && std::filesystem::exists("/sys/class/net/" + bind_address, ec)) {
    attr.iface = bind_address;  // an interface name: Gloo binds to its address
  } else {
    // An address, not a hostname lookup of this machine: in a netns the hostname resolves to
    // 127.0.0.1 and peers in other namespaces cannot connect (NETLAB-NOTES pitfall 4).
    attr.hostname = where;
  }
  try {
    return gloo::transport::tcp::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot bind the collective transport to " + where + " (" + e.what() +
                             "): pass --bind with an address or interface of this host");
  }
}

std::shared_ptr<gloo::transport::Device> makeIbverbsDevice(const std::string& name, int port,
                                                           int gid_index) {
  const std::vector<std::string> names = gloo::transport::ibverbs::getDeviceNames();
  std::string have;
  for (const auto& n : names) have += (have.empty() ? "" : ", ") + n;
  if (names.empty())
    throw std::runtime_error(
        "--transport ibverbs: this host has no RDMA device (ibv_devices lists none): load the "
        "NIC's RDMA driver, or for soft-RoCE `modprobe rdma_rxe` and `rdma link add rxe0 type rxe "
        "netdev ETH`; or use --transport tcp");
  std::string device = name;
  if (device.empty()) {
    if (names.size() > 1)
      throw std::runtime_error("--transport ibverbs: this host has several RDMA devices (" + have +
                               "): pick one with --rdma-device");
    device = names.front();
  }
  if (std::find(names.begin(), names.end(), device) == names.end())
    throw std::runtime_error("--rdma-device " + device + ": no such RDMA device (this host has " +
                             have + ")");
  gloo::transport::ibverbs::attr attr;
  attr.name = device;
  attr.port = port;
  attr.index = gid_index;
  try {
    return gloo::transport::ibverbs::CreateDevice(attr);
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot open RDMA device " + device + " port " + std::to_string(port) +
                             " GID index " + std::to_string(gid_index) + " (" + e.what() +
                             "): check `ibv_devinfo -d " + device +
                             "` and the GID table (`rdma link`, show_gids) for --gid-index");
  }
}

std::shared_ptr<gloo::Context> connectContext(gloo::rendezvous::Store& store,
                                              const std::string& prefix, int rank, int size,
                                              int base,
                                              std::shared_ptr<gloo::transport::Device>& device,
                                              std::chrono::milliseconds timeout) {
  auto context = std::make_shared<gloo::rendezvous::Context>(rank, size, base);
  context->setTimeout(timeout);
  gloo::rendezvous::PrefixStore scoped(prefix, store);
  context->connectFullMesh(scoped, device);
  return context;
}

size_t defaultPrimeBytes() {
  size_t bytes = 4u << 20;
  std::ifstream f("/proc/sys/net/core/wmem_max");
  size_t v = 0;
  if (f >> v && v > 0) bytes = v;
  return std::clamp<size_t>(bytes, 64u << 10, 32u << 20);
}

size_t primePairs(gloo::Context& context, size_t bytes) {
  const int n = context.size;
  if (n == 1) return 0;
  std::vector<char> out(bytes, 0);
  std::vector<std::vector<char>> in(n);
  std::vector<std::unique_ptr<gloo::transport::Buffer>> sends(n), recvs(n);
  // Same slot on every rank: nextSlot() advances identically everywhere.
  const int slot = context.nextSlot();
  for (int p = 0; p < n; ++p) {
    if (p == context.rank) continue;
    auto& pair = context.getPair(p);
    in[p].resize(bytes);
    recvs[p] = pair->createRecvBuffer(slot, in[p].data(), bytes);
    sends[p] = pair->createSendBuffer(slot, out.data(), bytes);
  }
  for (int p = 0; p < n; ++p)
    if (sends[p]) sends[p]->send();
  for (int p = 0; p < n; ++p) {
    if (!sends[p]) continue;
    recvs[p]->waitRecv();
    sends[p]->waitSend();
  }
  return bytes;
}

}  // namespace bpftrain::trainer::collective
