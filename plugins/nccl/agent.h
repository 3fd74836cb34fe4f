// The plugin's one background thread, shared by the tuner and the profiler of a process: it
// says hello to the collector (job, rank, node, pid, tids), drains the profiler's completions
// and counters into wire frames every flush interval, and receives signed tuner decisions on the
// same socket (the controller answers the address the frames come from), verifies them and
// publishes them to the DecisionBoard. Started by the first communicator's init, stopped and
// joined by the last one's finalize, so NCCL may dlclose the library afterwards.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "plugins/nccl/agent_config.h"
#include "plugins/nccl/decision_board.h"
#include "plugins/nccl/decision_verifier.h"
#include "plugins/nccl/nccl_abi.h"
#include "plugins/nccl/profiler.h"
#include "plugins/nccl/tuner.h"

namespace bpftrain::nccl_plugin {

class Agent {
 public:
  Agent(ProfilerCore& profiler, Tuner& tuner, DecisionBoard& board);
  ~Agent();

  // Reference counted by communicators; the first starts the thread. `rank`/`nranks` (profiler
  // init) name this process when no launcher variable does; -1 when unknown (tuner init).
  void acquire(abi::ncclDebugLogger_t logger, int rank, int nranks);
  void release();

 private:
  struct CollKey {
    uint32_t comm;
    uint8_t func, algo, proto;
    auto operator<=>(const CollKey&) const = default;
  };
  struct CollAgg {
    uint64_t count = 0, bytes = 0, timed_ns = 0, timed_bus_bytes = 0;
    uint8_t channels = 0;
  };

  void start();
  void stop();
  void run();
  void flush();
  void receive();
  void send(std::span<const uint8_t> frame);
  void sendHello();
  void log(abi::ncclDebugLogLevel level, const std::string& text);
  std::string commLabel(uint32_t comm_index) const;

  ProfilerCore& profiler_;
  Tuner& tuner_;
  DecisionBoard& board_;
  std::mutex mutex_;  // acquire/release only
  int users_ = 0;
  abi::ncclDebugLogger_t logger_ = nullptr;
  std::atomic<int> comm_rank_{-1}, comm_nranks_{0};  // from the first profiler init

  // Owned by the thread while it runs.
  AgentConfig config_;
  std::unique_ptr<DecisionVerifier> verifier_;
  int fd_ = -1, wake_fd_ = -1;
  std::thread thread_;
  uint64_t sender_id_ = 0;
  uint32_t sequence_ = 0;
  int64_t rank_ = -1;
  uint64_t last_hello_ns_ = 0;
  std::map<std::tuple<uint32_t, uint8_t, int, bool>, LinkCounters> links_seen_;
  std::array<uint64_t, size_t(Drop::kCount)> drops_seen_{};
  std::array<uint64_t, size_t(Refusal::kCount)> refusals_seen_{};
  std::map<CollKey, uint8_t> channels_;
};

}  // namespace bpftrain::nccl_plugin
