// bpftrain-rdma-posts RANK STORE_DIR DEVICE K: the known-answer workload of the rdma_verbs probe.
// Two ranks over Gloo's ibverbs transport (port 1, GID index 1); once STORE_DIR/go exists, rank 0
// posts exactly K RDMA writes of 4 KiB to rank 1 through one bound buffer (Pair::send), each
// waited for before the next, and rank 1 waits for the K immediates. Both ranks connect before the
// go, so a probe attached in between sees every write (and the memory-region send of rank 1's
// buffer, made after the go too). Prints "posted K" and exits 0 when done.
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/transport/buffer.h>
#include <gloo/transport/ibverbs/device.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <vector>

int main(int argc, char** argv) {
  if (argc != 5) {
    std::fprintf(stderr, "usage: bpftrain-rdma-posts RANK STORE_DIR DEVICE K\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const std::string dir = argv[2];
  const int k = std::atoi(argv[4]);
  try {
    gloo::transport::ibverbs::attr attr;
    attr.name = argv[3];
    attr.port = 1;
    attr.index = 1;  // the IPv4 GID of numalab --rxe
    auto device = gloo::transport::ibverbs::CreateDevice(attr);
    gloo::rendezvous::FileStore store(dir);
    auto context = std::make_shared<gloo::rendezvous::Context>(rank, 2);
    context->setTimeout(std::chrono::seconds(60));
    context->connectFullMesh(store, device);
    // Both queue pairs are ready before either side sends (the trainer's connect barrier).
    store.set("connected/" + std::to_string(rank), {'1'});
    store.wait({"connected/0", "connected/1"}, std::chrono::seconds(60));
    std::printf("ready\n");
    std::fflush(stdout);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (access((dir + "/go").c_str(), F_OK) != 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::fprintf(stderr, "rank %d: no %s/go within 60 s\n", rank, dir.c_str());
        return 1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a file: no events
    }
    std::vector<char> data(4096, char(rank));
    auto& pair = context->getPair(1 - rank);
    constexpr int kSlot = 7;
    // The buffer lives until both sides are done (no teardown while the peer still sends).
    std::unique_ptr<gloo::transport::Buffer> buffer;
    if (rank == 0) {
      buffer = pair->createSendBuffer(kSlot, data.data(), data.size());
      for (int i = 0; i < k; ++i) {
        buffer->send();
        buffer->waitSend();
      }
    } else {
      buffer = pair->createRecvBuffer(kSlot, data.data(), data.size());
      for (int i = 0; i < k; ++i) buffer->waitRecv();
    }
    // Neither side closes its queue pair while the other still uses it.
    store.set("done/" + std::to_string(rank), {'1'});
    store.wait({"done/0", "done/1"}, std::chrono::seconds(60));
    std::printf("posted %d\n", rank == 0 ? k : 0);
    std::fflush(stdout);
    // Out without destructors: tearing down Gloo's ibverbs buffer, pairs and device while its
    // device thread still polls the completion queue crashed rank 1 (SIGSEGV after "posted 0",
    // 2 of 2 runs in numalab); the kernel releases the queue pairs and memory regions at exit.
    std::_Exit(0);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "rank %d: %s\n", rank, e.what());
    return 1;
  }
  return 0;
}
