// The Gloo Communicator: rendezvous, one context for the world plus the node and leader
// sub-group contexts of the hierarchical topology, and one algorithm object per topology; over
// TCP or, with bound buffers only, over ibverbs (RDMA): there the ring is the bound-buffer ring,
// and hierarchical's node stage stays on the host (shared memory; its set-up messages and the
// fallback node stage over TCP on --bind, default loopback) while its leaders use the device.
#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/context.h>
#include <gloo/rendezvous/hash_store.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/device.h>
#include <gloo/transport/unbound_buffer.h>
#include <signal.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <string_view>

#include "trainer/collective/allreduce_algorithm.h"
#include "trainer/collective/bound_sync.h"
#include "trainer/collective/buffer_cache.h"
#include "trainer/collective/communicator.h"
#include "trainer/collective/rendezvous.h"

namespace bpftrain::trainer::collective {
namespace {

constexpr uint64_t kBroadcastSlot = 0xB7000005ull << 24;
// Hierarchical chunk: 1 MiB keeps the leader's per-member scratch small and the pipeline deep.
constexpr size_t kHierarchicalChunkElements = 256 * 1024;

std::string describe(const CommOptions& o) {
  return "rank " + std::to_string(o.rank) + " of " + std::to_string(o.world);
}

class GlooCommunicator final : public Communicator {
 public:
  explicit GlooCommunicator(const CommOptions& options) : options_(options) {
    // A single rank needs no shared store: an in-process one will do.
    if (options.world == 1 && options.store.empty())
      store_ = std::make_unique<gloo::rendezvous::HashStore>();
    else
      store_ = openStore(options.store);
    joinStore(*store_, options.store, options.prefix, options.rank, options.world, options.timeout);
    ibverbs_ = options.transport == "ibverbs";
    device_ = ibverbs_
                  ? makeIbverbsDevice(options.rdma_device, options.rdma_port, options.gid_index)
                  : makeTcpDevice(options.bind_address);
    const int world = options.world;
    try {
      context_ = connect(options.prefix + "/world", options.rank, world, bcubeBase(world));
      // Priming sizes TCP's SO_SNDBUF; an RDMA queue pair has no socket buffer to size.
      prime_bytes_ = ibverbs_ ? 0 : defaultPrimeBytes();
      if (prime_bytes_ > 0) primePairs(*context_, prime_bytes_);
      buildHierarchy();
    } catch (const gloo::Exception& e) {
      throw std::runtime_error(
          describe(options) + ": connecting to peers through store " + options.store + " failed (" +
          e.what() +
          "): check that every rank can reach the others' --bind address (over "
          "ibverbs: --rdma-device and --gid-index) "
          "and that the store holds no keys from an earlier run (use a "
          "fresh directory or prefix)");
    }
    algorithms_[size_t(Topology::kHalvingDoubling)] = makeHalvingDoublingAllreduce(context_);
    algorithms_[size_t(Topology::kBcube)] = makeBcubeAllreduce(context_);
    algorithms_[size_t(Topology::kRing)] =
        ibverbs_ ? makeBoundRingAllreduce(context_) : makeRingAllreduce(context_);
    HierarchicalConfig hierarchical;
    hierarchical.bound_leader_ring = ibverbs_;
    hierarchical.chunk_elements = kHierarchicalChunkElements;
    hierarchical.shared_memory = options.shared_memory;
    hierarchical.multi_node = multi_node_;
    hierarchical.node_world_ranks = node_members_;
    hierarchical.leader_world_ranks = leaders_;
    try {
      algorithms_[size_t(Topology::kHierarchical)] =
          makeHierarchicalAllreduce(node_context_, leader_context_, hierarchical, &node_stage_);
    } catch (const gloo::Exception& e) {
      throw std::runtime_error(describe(options) +
                               ": setting up the hierarchical node stage failed (" + e.what() +
                               "): a rank of this node died or is unreachable");
    }
    if (node_stage_.rfind("tcp (", 0) == 0)
      std::fprintf(stderr, "bpftrain collective: %s: hierarchical node stage over %s\n",
                   describe(options).c_str(), node_stage_.c_str());
  }

  ~GlooCommunicator() override {
    // Algorithms hold buffers registered on the contexts: release them first.
    for (auto& a : algorithms_) a.reset();
    broadcast_buffers_.clear();
    bound_broadcasts_.clear();
    bound_barrier_.reset();
  }

  void allreduce(std::span<float> data, Topology topology) override {
    AllreduceAlgorithm& a = algorithm(topology);
    guarded("allreduce", topologyName(topology), data.size_bytes(), [&] { a.run(data); });
  }

  void warm(std::span<float> data, Topology topology) override {
    AllreduceAlgorithm& a = algorithm(topology);
    guarded("allreduce", topologyName(topology), data.size_bytes(), [&] { a.warm(data); });
  }

  void broadcast(std::span<uint8_t> data, int root) override {
    if (root < 0 || root >= options_.world)
      throw std::invalid_argument("broadcast root " + std::to_string(root) + " outside world " +
                                  std::to_string(options_.world));
    if (options_.world == 1 || data.empty()) return;
    if (ibverbs_) {
      guarded("broadcast", "", data.size(), [&] {
        // A bound-buffer broadcast, built once per (buffer, root) as the buffers bind to it.
        // The key's length folds the root in: a different root is a different algorithm.
        const size_t key = data.size() * size_t(options_.world) + size_t(root);
        bound_broadcasts_
            .get(data.data(), key,
                 [&] {
                   return std::make_unique<BoundBroadcast>(context_, data.data(), data.size(),
                                                           root);
                 })
            .run();
      });
      return;
    }
    guarded("broadcast", "", data.size(), [&] {
      auto& buf = broadcast_buffers_.get(data.data(), data.size(), [&] {
        return context_->createUnboundBuffer(data.data(), data.size());
      });
      const auto timeout = context_->getTimeout();
      if (options_.rank == root) {
        for (int p = 0; p < options_.world; ++p)
          if (p != root) buf.send(p, kBroadcastSlot);
        for (int p = 1; p < options_.world; ++p) buf.waitSend(timeout);
      } else {
        buf.recv(root, kBroadcastSlot);
        buf.waitRecv(timeout);
      }
    });
  }

  void barrier() override {
    if (options_.world == 1) return;
    guarded("barrier", "", 0, [&] {
      if (ibverbs_) {  // Gloo's barrier() sends on unbound buffers
        if (!bound_barrier_) bound_barrier_ = std::make_unique<BoundBarrier>(context_);
        bound_barrier_->run();
        return;
      }
      gloo::BarrierOptions opts(context_);
      opts.setTimeout(context_->getTimeout());
      gloo::barrier(opts);
    });
  }

  std::string nodeStage() const override { return node_stage_; }
  int rank() const override { return options_.rank; }
  int world() const override { return options_.world; }

 private:
  AllreduceAlgorithm& algorithm(Topology topology) {
    const size_t t = static_cast<size_t>(topology);
    if (t >= algorithms_.size())
      throw std::invalid_argument("unknown topology " + std::to_string(t));
    if (!algorithms_[t])
      throw std::invalid_argument(describe(options_) + ": " +
                                  topologyUnsupported(topology, options_.transport));
    return *algorithms_[t];
  }

  // A full-mesh context. Over ibverbs every rank then says it has connected and waits for all the
  // others: a rank that sent as soon as its own side was up would reach a peer whose queue pair
  // cannot receive yet, and under slow peers (TCG) Gloo's fixed RC retry budget runs out (the QP
  // errors, "sendPending_ == 0" enforce). NUMALAB-NOTES.md has the measurement.
  std::shared_ptr<gloo::Context> connect(const std::string& prefix, int rank, int size, int base) {
    auto context = connectContext(*store_, prefix, rank, size, base, device_, options_.timeout);
    if (ibverbs_)
      joinStore(*store_, options_.store, prefix + "/connected", rank, size, options_.timeout);
    return context;
  }

  void buildHierarchy() {
    const int world = options_.world;
    std::vector<int> node_of = options_.node_of;
    if (node_of.empty()) {
      node_of.resize(world);
      for (int r = 0; r < world; ++r) node_of[r] = r;
    }
    std::vector<int> members, leaders;  // ranks on my node; lowest rank of every node
    for (int r = 0; r < world; ++r) {
      if (node_of[r] == node_of[options_.rank]) members.push_back(r);
      if (std::find(node_of.begin(), node_of.begin() + r, node_of[r]) == node_of.begin() + r)
        leaders.push_back(r);
    }
    const int local =
        int(std::find(members.begin(), members.end(), options_.rank) - members.begin());
    if (members.size() > 1) {
      // Over ibverbs the node context carries only the shared-memory set-up (or the TCP node
      // stage): ranks of one host reach each other over TCP, and unbound buffers need it.
      auto node_device = ibverbs_ ? makeTcpDevice(options_.bind_address) : device_;
      node_context_ = connectContext(
          *store_, options_.prefix + "/node/" + std::to_string(node_of[options_.rank]), local,
          int(members.size()), 2, node_device, options_.timeout);
      primePairs(*node_context_, ibverbs_ ? defaultPrimeBytes() : prime_bytes_);
    }
    multi_node_ = leaders.size() > 1;
    node_members_ = members;
    leaders_ = leaders;
    if (local == 0 && leaders.size() > 1) {
      if (int(leaders.size()) == world) {
        leader_context_ = context_;  // every rank is alone on its node
      } else {
        const int index =
            int(std::find(leaders.begin(), leaders.end(), options_.rank) - leaders.begin());
        leader_context_ = connect(options_.prefix + "/leaders", index, int(leaders.size()), 2);
        if (!ibverbs_) primePairs(*leader_context_, prime_bytes_);
      }
    }
  }

  // Runs f; on failure breaks the communicator and rethrows with context. The message is built
  // only on failure: the hot path allocates nothing here.
  template <typename F>
  void guarded(std::string_view op, std::string_view detail, size_t bytes, F&& f) {
    if (!broken_.empty())
      throw std::runtime_error(describe(options_) +
                               ": communicator unusable after an earlier "
                               "failure (" +
                               broken_ + "); restart the job");
    try {
      f();
    } catch (const std::exception& e) {
      broken_ = e.what();
      // Close our connections so peers blocked on us fail now instead of at their timeout.
      for (auto* c : {context_.get(), node_context_.get(), leader_context_.get()})
        if (c) c->closeConnections();
      std::string what(op);
      if (!detail.empty()) what += " (" + std::string(detail) + ")";
      throw std::runtime_error(describe(options_) + ": " + what + " of " + std::to_string(bytes) +
                               " bytes failed: " + e.what() +
                               " (a peer died or did not respond within " +
                               std::to_string(options_.timeout.count()) + " ms)");
    }
  }

  CommOptions options_;
  std::unique_ptr<gloo::rendezvous::Store> store_;
  std::shared_ptr<gloo::transport::Device> device_;
  std::shared_ptr<gloo::Context> context_;
  std::shared_ptr<gloo::Context> node_context_;
  std::shared_ptr<gloo::Context> leader_context_;
  size_t prime_bytes_ = 0;
  bool multi_node_ = false;
  std::vector<int> node_members_;  // world ranks on this rank's node
  std::vector<int> leaders_;       // world rank of each node's leader
  std::string node_stage_;
  std::array<std::unique_ptr<AllreduceAlgorithm>, kTopologyCount> algorithms_;
  BufferCache<gloo::transport::UnboundBuffer> broadcast_buffers_{8};
  std::string broken_;
  bool ibverbs_ = false;
  BufferCache<BoundBroadcast> bound_broadcasts_{8};
  std::unique_ptr<BoundBarrier> bound_barrier_;
};

void validate(const CommOptions& o) {
  if (o.world < 1)
    throw std::invalid_argument("world size must be >= 1 (got " + std::to_string(o.world) + ")");
  if (o.rank < 0 || o.rank >= o.world)
    throw std::invalid_argument("rank " + std::to_string(o.rank) + " outside world of " +
                                std::to_string(o.world) + ": ranks are 0.." +
                                std::to_string(o.world - 1));
  if (!o.node_of.empty() && int(o.node_of.size()) != o.world)
    throw std::invalid_argument("node_of has " + std::to_string(o.node_of.size()) +
                                " entries for a world of " + std::to_string(o.world) +
                                ": give one node index per rank");
  if (o.timeout.count() <= 0) throw std::invalid_argument("timeout must be positive");
  if (std::find(std::begin(kTransports), std::end(kTransports), o.transport) ==
      std::end(kTransports))
    throw std::invalid_argument("transport " + o.transport + ": expected tcp or ibverbs");
}

}  // namespace

std::string topologyUnsupported(Topology, std::string_view) {
  // Every topology runs over both transports (over ibverbs the ring and hierarchical's leaders on
  // bound buffers). Kept as the one place a transport would say what it cannot run.
  return {};
}

std::unique_ptr<Communicator> Communicator::create(const CommOptions& options) {
  validate(options);
  // Gloo writes to sockets without MSG_NOSIGNAL: when a peer dies, the default SIGPIPE action
  // would kill this rank silently instead of letting the write fail and raise our exception.
  struct sigaction current {};
  if (sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL)
    signal(SIGPIPE, SIG_IGN);
  return std::make_unique<GlooCommunicator>(options);
}

}  // namespace bpftrain::trainer::collective
