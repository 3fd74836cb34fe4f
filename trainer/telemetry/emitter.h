// Non-blocking UDP telemetry from a rank to the collector (common/wire_format.h frames).
// The training thread only writes into lock-free slots (a single-producer ring of per-step records
// and atomic gauges); a small emitter thread wakes at --metrics-hz, encodes into a fixed buffer and
// sends with MSG_DONTWAIT. A full socket or a full ring drops and counts (kTelemetryDropped): the
// training loop never waits on telemetry, and nothing allocates per send.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/wire_format.h"

namespace bpftrain::trainer::telemetry {

struct EmitterOptions {
  std::string collector = "127.0.0.1:9470";  // HOST:PORT, [IPV6]:PORT or NAME:PORT
  int hz = 10;                               // 1..100
  std::string job = "default";
  std::string node;  // defaults to the hostname
  uint32_t rank = 0;
  uint32_t world = 1;
  std::chrono::milliseconds hello_every{3000};
  size_t ring_capacity = 4096;  // per-step records buffered between ticks
  // false: step records send step seconds only, leaving the allreduce series to another source
  // for the same job and rank (the project's NCCL profiler plugin, per collective).
  bool report_allreduce = true;
};

// One step's measurements, pushed by the training thread.
struct StepRecord {
  uint64_t timestamp_ns = 0;  // CLOCK_REALTIME at the end of the step
  double step_seconds = 0;
  double allreduce_seconds = 0;
  double allreduce_bytes = 0;
  double busbw = 0;
  // The ring probe this step ran (trainer/control/ring_probe.h), seconds; < 0: none.
  double ring_probe_seconds = -1;
};

class Emitter {
 public:
  // Resolves and connects the UDP socket; throws std::runtime_error naming the bad address.
  explicit Emitter(const EmitterOptions& options);
  ~Emitter();
  Emitter(const Emitter&) = delete;
  Emitter& operator=(const Emitter&) = delete;

  void start();
  // Sends what is pending, then stops the thread.
  void stop();

  // ---- training thread (wait-free)
  void pushStep(const StepRecord& r);
  void setGauge(wire::MetricId id, double value);
  // A step of `samples` began (CLOCK_MONOTONIC ns) / ended. While one runs longer than the last
  // step took, the samples/s gauge reports samples / its elapsed time instead of the last step's
  // rate: a step slowed to seconds by congestion shows at the next tick, not when it ends (the
  // controller's throughput corroboration waited a whole slow step for it).
  void stepStarted(uint64_t monotonic_ns, double samples);
  void stepEnded();
  // The samples/s gauge's value at `monotonic_now_ns`, given the last step's rate (see above).
  double samplesPerSecondNow(double last_step_rate, uint64_t monotonic_now_ns) const;
  // Adds to a counter; the sum since the last tick is sent as one increment.
  void addCounter(wire::MetricId id, double delta);
  // Announces a new thread list (sent in the next hello, which goes out at the next tick).
  void setThreads(const std::vector<pid_t>& tids);

  uint64_t dropped() const { return dropped_.load(std::memory_order_relaxed); }
  uint64_t framesSent() const { return frames_sent_.load(std::memory_order_relaxed); }
  pid_t threadId() const { return thread_tid_.load(); }
  uint64_t senderId() const { return sender_id_; }

 private:
  void run();
  void tick(bool force_hello);
  void sendHello();
  void flushRecords(uint64_t now_ns);
  bool sendDatagram(size_t len);

  EmitterOptions options_;
  int fd_ = -1;
  uint64_t sender_id_ = 0;
  uint32_t sequence_ = 0;
  std::vector<uint8_t> buffer_;              // one frame, reused
  std::vector<wire::SampleRecord> records_;  // reused per tick

  std::vector<StepRecord> ring_;
  std::atomic<uint64_t> head_{0}, tail_{0};
  static constexpr size_t kGaugeSlots = size_t(wire::MetricId::kLast) + 1;
  std::array<std::atomic<double>, kGaugeSlots> gauges_{};
  std::array<std::atomic<bool>, kGaugeSlots> gauge_set_{};
  std::array<std::atomic<double>, kGaugeSlots> counters_{};
  std::atomic<bool> checkpoint_latched_{false};
  std::atomic<uint64_t> step_started_ns_{0};  // 0: no step running
  std::atomic<double> step_samples_{0};

  std::mutex tids_mutex_;
  std::vector<uint32_t> tids_;
  std::vector<uint32_t> tids_copy_;
  std::atomic<bool> tids_changed_{true};

  std::atomic<uint64_t> dropped_{0};
  std::atomic<uint64_t> frames_sent_{0};
  std::atomic<pid_t> thread_tid_{0};
  std::atomic<bool> stop_{false};
  std::mutex wake_mutex_;
  std::condition_variable wake_;
  std::thread thread_;
  std::chrono::steady_clock::time_point last_hello_{};
  uint64_t reported_dropped_ = 0;
};

}  // namespace bpftrain::trainer::telemetry
