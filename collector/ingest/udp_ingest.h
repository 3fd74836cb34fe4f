// The UDP front door: N sockets bound to one port with SO_REUSEPORT (the kernel spreads senders
// across them by flow hash), one thread each, draining with recvmmsg into preallocated buffers.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "collector/ingest/dispatcher.h"
#include "collector/ingest/ingest_stats.h"

namespace bpftrain::collector::ingest {

struct UdpIngestOptions {
  std::string host = "127.0.0.1";
  uint16_t port = 9470;  // 0: the kernel picks one; all sockets share it
  int threads = 2;
  int rcvbuf_bytes = 32 << 20;
  int first_writer = 0;  // store writer index of thread 0; thread i uses first_writer + i
  DispatchOptions dispatch;
};

class UdpIngest {
 public:
  // Binds every socket; returns nullptr with `error` naming the fix (address in use, bad host).
  static std::unique_ptr<UdpIngest> start(const UdpIngestOptions& options,
                                          window::SeriesStore& store, SenderRegistry& registry,
                                          std::string& error);
  ~UdpIngest();  // stops and joins the threads, closes the sockets

  void stop();
  uint16_t port() const { return port_; }
  // Sends one datagram from the ingest port (thread 0's socket), so that a plugin whose socket
  // is connected to that port accepts it (the NCCL controller's decisions). Never blocks; false
  // with `error` set when it did not leave.
  bool sendTo(const SocketAddress& to, std::span<const uint8_t> datagram, std::string& error);
  int rcvbufBytes() const { return rcvbuf_bytes_; }  // what the kernel granted (per socket)
  bool rcvbufForced() const { return rcvbuf_forced_; }
  int threads() const { return int(workers_.size()); }
  // Per-thread counters, valid while this object lives.
  const std::vector<std::unique_ptr<IngestStats>>& stats() const { return stats_; }

 private:
  struct Worker;
  UdpIngest() = default;
  void run(Worker& w);

  uint16_t port_ = 0;
  int rcvbuf_bytes_ = 0;
  bool rcvbuf_forced_ = false;
  std::atomic<bool> stopping_{false};
  std::vector<std::unique_ptr<IngestStats>> stats_;
  std::vector<std::unique_ptr<Worker>> workers_;
};

// Sums per-thread stats (scrape time).
struct IngestTotals {
  uint64_t samples[size_t(Protocol::kCount)]{};
  uint64_t decode_errors[size_t(DecodeReason::kCount)]{};
  uint64_t dropped[size_t(DropReason::kCount)]{};
  uint64_t ignored[size_t(IgnoredReason::kCount)]{};
  uint64_t frames_lost = 0, kernel_drops = 0, datagrams = 0, bytes = 0;
  void add(const IngestStats& s);
};

}  // namespace bpftrain::collector::ingest
