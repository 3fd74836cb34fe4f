// --upstream HOST:PORT: after each window step ends, send every series' completed step to a
// parent collector as kWindowSummary frames over UDP. Sends never block: a full socket drops the
// frame and counts it. Degradations (drops, send errors, oversized series, missed steps) are
// logged once each and exported by collectable().
#pragma once

#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "collector/upstream/summary_codec.h"
#include "collector/window/series_store.h"

namespace bpftrain::collector::upstream {

struct UpstreamOptions {
  std::string target;      // HOST:PORT of the parent's ingest port
  uint64_t sender_id = 0;  // 0: derived from the host name and pid
  // How long after a step ends before it is sent, so the last samples of the step land first.
  std::chrono::nanoseconds delay = std::chrono::milliseconds(50);
  int sndbuf_bytes = 4 << 20;  // SO_SNDBUF; 0 keeps the system default
};

struct UpstreamStats {
  uint64_t steps_sent = 0;
  uint64_t steps_missed = 0;  // evicted before the forwarder got to them (it fell behind)
  uint64_t frames_sent = 0;
  uint64_t frames_dropped = 0;  // socket full (EAGAIN/ENOBUFS)
  uint64_t send_errors = 0;     // other send failures, e.g. ECONNREFUSED: parent not listening
  uint64_t series_sent = 0;
  uint64_t series_oversized = 0;  // could not fit in one frame: not sent
};

class UpstreamForwarder {
 public:
  // Resolves the target and opens the socket; null with a one-line error naming the fix.
  static std::unique_ptr<UpstreamForwarder> create(const window::SeriesStore& store,
                                                   const UpstreamOptions& options,
                                                   std::string& error);
  // Uses an already connected datagram socket (takes ownership), e.g. one end of a socketpair.
  static std::unique_ptr<UpstreamForwarder> adopt(const window::SeriesStore& store, int fd,
                                                  const UpstreamOptions& options);
  ~UpstreamForwarder();

  // Background thread: forwards each step once it has ended (plus options.delay).
  void start();
  void stop();

  // Sends one completed step now; returns the series sent. The thread calls this; so can tests.
  size_t forwardStep(int64_t step);

  UpstreamStats stats() const;
  uint64_t senderId() const { return sender_id_; }
  // bpftrain_collector_upstream_{frames,series,steps}_total{result}.
  std::shared_ptr<prometheus::Collectable> collectable();

 private:
  UpstreamForwarder(const window::SeriesStore& store, const UpstreamOptions& options, int fd,
                    uint64_t sender_id);
  void run(int64_t first_step);
  void send(std::span<const uint8_t> frame);
  void logOnce(std::atomic<bool>& flag, const std::string& line);

  const window::SeriesStore& store_;
  UpstreamOptions options_;
  int fd_;
  uint64_t sender_id_;
  std::mutex send_mutex_;  // forwardStep from the thread and from callers
  SummaryFramer framer_;
  std::atomic<uint64_t> steps_sent_{0}, steps_missed_{0}, frames_sent_{0}, frames_dropped_{0},
      send_errors_{0}, series_sent_{0}, series_oversized_{0};
  std::atomic<bool> logged_drop_{false}, logged_error_{false}, logged_oversized_{false},
      logged_missed_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace bpftrain::collector::upstream
