// Rendezvous helpers: open the store named by CommOptions::store (a directory or redis HOST:PORT),
// wait for every rank with a message naming the missing ones, build TCP devices and connected
// Gloo contexts, and size each pair's send buffer deterministically (see primePairs()).
#pragma once

#include <chrono>
#include <memory>
#include <string>

namespace gloo {
class Context;
namespace rendezvous {
class Store;
}
namespace transport {
class Device;
}
}  // namespace gloo

namespace bpftrain::trainer::collective {

// "DIR" -> Gloo FileStore (created if missing); "HOST:PORT" that is not an existing directory ->
// Gloo RedisStore. Throws std::runtime_error naming the fix.
std::unique_ptr<gloo::rendezvous::Store> openStore(const std::string& spec);

// Every rank sets "<prefix>/join/<rank>" and waits for the others. On timeout throws e.g.
// "rank 2 of 4 did not join store /tmp/s (prefix bpftrain) within 30s: ...".
void joinStore(gloo::rendezvous::Store& store, const std::string& store_name,
               const std::string& prefix, int rank, int world, std::chrono::milliseconds timeout);

// TCP device bound to an IP address, a hostname, or an interface name; empty means 127.0.0.1.
std::shared_ptr<gloo::transport::Device> makeTcpDevice(const std::string& bind_address);

// Gloo's ibverbs device on RDMA device `name` (empty: the host's only one), `port`, GID table index
// `gid_index`. Throws std::runtime_error naming the fix (no device, unknown name, bad port/GID).
std::shared_ptr<gloo::transport::Device> makeIbverbsDevice(const std::string& name, int port,
                                                           int gid_index);

// Full-mesh context of `size` ranks under "<prefix>" in the store.
std::shared_ptr<gloo::Context> connectContext(gloo::rendezvous::Store& store,
                                              const std::string& prefix, int rank, int size,
                                              int base,
                                              std::shared_ptr<gloo::transport::Device>& device,
                                              std::chrono::milliseconds timeout);

// Gloo locks a pair's SO_SNDBUF at the size of the first large bound-buffer message and never
// sizes it for unbound buffers; a tiny first message would leave it at a few KB and make results
// depend on which algorithm ran first. We send one message of `bytes` on every pair at start-up,
// so every pair starts in the same, large state. Returns the bytes used.
size_t primePairs(gloo::Context& context, size_t bytes);

// The priming size: net.core.wmem_max (the kernel's cap for SO_SNDBUF), at most 32 MiB.
size_t defaultPrimeBytes();

}  // namespace bpftrain::trainer::collective
