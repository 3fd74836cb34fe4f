// Plays NCCL and the collector for the NCCL plugin tests. NCCL's side: dlopen the plugin exactly
// as NCCL 2.28.9 does (RTLD_NOW | RTLD_LOCAL, dlsym of the versioned data symbol), hand it a flat
// float[7][3] cost table cast to float**, and replay NCCL's selection rule (topoGetAlgoInfo: the
// first strictly smallest entry >= 0). The collector's side: a UDP socket on 127.0.0.1:0 that
// receives the plugin's frames (hello, samples, labelled samples) and sends it signed decisions
// back to the address its frames came from, as the controller would.
#pragma once

#include <dlfcn.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/control_frame.h"
#include "common/wire_format.h"
#include "plugins/nccl/nccl_abi.h"
#include "tests/support/child_process.h"

namespace bpftrain::testing::nccl {

namespace abi = bpftrain::nccl_plugin::abi;
using Table = std::array<float, abi::kNumAlgorithms * abi::kNumProtocols>;
inline constexpr int TREE = 0, RING = 1, NVLS = 4, PAT = 6;
inline constexpr int LL = 0, LL128 = 1, SIMPLE = 2;
inline constexpr char kSecret[] = "nccl-plugin-test-secret-0123456789";

inline std::string pluginPath(const std::string& name = "libnccl-tuner-bpftrain.so") {
  return buildPath("plugins/nccl/" + name);
}

// What NCCL 2.28.9 computes for an 8-rank AllReduce on one node without NVLS or CollNet:
// tree and ring model all three protocols, everything else is -1 (unsupported). NCCL's own
// choice is TREE/LL (10 us).
inline Table ncclTable() {
  Table t;
  t.fill(-1.0f);
  t[TREE * 3 + LL] = 10.0f;
  t[TREE * 3 + LL128] = 12.5f;
  t[TREE * 3 + SIMPLE] = 31.0f;
  t[RING * 3 + LL] = 14.0f;
  t[RING * 3 + LL128] = 11.0f;
  t[RING * 3 + SIMPLE] = 20.0f;
  return t;
}

// topoGetAlgoInfo's scan: algorithms 0..6, protocols 0..2, first strictly smallest entry >= 0.
inline std::pair<int, int> ncclSelect(const Table& t) {
  float best = 3600000000.0f;
  std::pair<int, int> chosen{-1, -1};
  for (int a = 0; a < abi::kNumAlgorithms; ++a)
    for (int p = 0; p < abi::kNumProtocols; ++p) {
      float v = t[a * abi::kNumProtocols + p];
      if (v == abi::kAlgoProtoIgnore) continue;
      if (v >= 0.0f && v < best) {
        best = v;
        chosen = {a, p};
      }
    }
  return chosen;
}

// True when every entry that was unsupported (< 0) before is still < 0.
inline bool noEntryRaised(const Table& before, const Table& after) {
  for (size_t i = 0; i < before.size(); ++i)
    if (before[i] < 0 && after[i] >= 0) return false;
  return true;
}

// NCCL's debug logger: the tests wait for the plugin's log lines.
struct LogCapture {
  static std::mutex& mutex() {
    static std::mutex m;
    return m;
  }
  static std::vector<std::string>& lines() {
    static std::vector<std::string> l;
    return l;
  }
  static void logger(abi::ncclDebugLogLevel, unsigned long, const char*, int, const char* fmt,
                     ...) {
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    std::vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    std::lock_guard<std::mutex> lock(mutex());
    lines().emplace_back(buf);
  }
  static size_t count(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mutex());
    size_t n = 0;
    for (const std::string& l : lines()) n += l.find(needle) != std::string::npos;
    return n;
  }
  static bool waitFor(const std::string& needle, size_t n, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    while (count(needle) < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    return true;
  }
};

struct Plugin {
  void* handle = nullptr;
  const abi::ncclTuner_v5_t* tuner_v5 = nullptr;
  const abi::ncclTuner_v4_t* tuner_v4 = nullptr;
  const abi::ncclTuner_v3_t* tuner_v3 = nullptr;
  const abi::ncclProfiler_v5_t* profiler_v5 = nullptr;
  const abi::ncclProfiler_v4_t* profiler_v4 = nullptr;
  std::string error;

  explicit Plugin(const std::string& path = pluginPath()) {
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      error = dlerror();
      return;
    }
    tuner_v5 = static_cast<const abi::ncclTuner_v5_t*>(dlsym(handle, "ncclTunerPlugin_v5"));
    tuner_v4 = static_cast<const abi::ncclTuner_v4_t*>(dlsym(handle, "ncclTunerPlugin_v4"));
    tuner_v3 = static_cast<const abi::ncclTuner_v3_t*>(dlsym(handle, "ncclTunerPlugin_v3"));
    profiler_v5 = static_cast<const abi::ncclProfiler_v5_t*>(dlsym(handle, "ncclProfiler_v5"));
    profiler_v4 = static_cast<const abi::ncclProfiler_v4_t*>(dlsym(handle, "ncclProfiler_v4"));
  }
  // NCCL dlcloses at the last finalize; the library stays mapped (-z nodelete).
  ~Plugin() {
    if (handle != nullptr) dlclose(handle);
  }
  Plugin(const Plugin&) = delete;
  Plugin& operator=(const Plugin&) = delete;
};

// Calls getCollInfo like enqueue.cc does; returns the (algorithm, protocol) NCCL then picks.
inline std::pair<int, int> tunerCall(const abi::ncclTuner_v5_t* t, void* ctx, Table& table,
                                     int* channels = nullptr,
                                     abi::ncclFunc_t coll = abi::ncclFuncAllReduce,
                                     abi::ncclResult_t* result = nullptr) {
  int n = 0;
  abi::ncclResult_t r =
      t->getCollInfo(ctx, coll, 1 << 20, 1, reinterpret_cast<float**>(table.data()),
                     abi::kNumAlgorithms, abi::kNumProtocols, 0, &n);
  if (result != nullptr) *result = r;
  if (channels != nullptr) *channels = n;
  return ncclSelect(table);
}

// The collector's end of the plugin's socket.
class FakeCollector {
 public:
  explicit FakeCollector(uint16_t port = 0) {
    fd_ = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(port);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
  }
  ~FakeCollector() { close(fd_); }
  int port() const { return port_; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }

  struct Sender {
    sockaddr_in addr{};
    uint32_t rank = 0;
    std::string job;
  };
  // Labelled values by "name{label values...}" (counters summed, gauges last) and hellos by
  // sender id, from everything received so far.
  std::map<std::string, double> values;
  std::map<uint64_t, Sender> senders;
  std::map<uint64_t, uint64_t> tuner_calls;  // per sender: the highest bpftrain_nccl_tuner_calls
  std::vector<double> allreduce_seconds;

  // Receives for up to `limit`, or until pred() holds.
  template <typename Pred>
  bool receiveUntil(Pred pred, std::chrono::milliseconds limit) {
    auto deadline = std::chrono::steady_clock::now() + limit;
    std::vector<uint8_t> buf(wire::kMaxDatagramSize);
    while (!pred()) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fd_, POLLIN, 0};
      if (poll(&p, 1, int(std::min<long long>(left.count(), 50))) <= 0) continue;
      sockaddr_in from{};
      socklen_t len = sizeof from;
      ssize_t n =
          recvfrom(fd_, buf.data(), buf.size(), 0, reinterpret_cast<sockaddr*>(&from), &len);
      if (n > 0) take(std::span<const uint8_t>(buf.data(), size_t(n)), from);
    }
    return true;
  }

  // Signs `c` and sends it to every sender seen (or one).
  void sendDecision(wire::NcclControl c, const Sender& to, std::string_view secret = kSecret) {
    c.timestamp_ns = c.timestamp_ns ? c.timestamp_ns : realtimeNowNs();
    std::vector<uint8_t> out(wire::kMaxFrameSize);
    out.resize(wire::encodeSignedNcclControl(out, 1, uint32_t(c.epoch), c, secret));
    sendto(fd_, out.data(), out.size(), 0, reinterpret_cast<const sockaddr*>(&to.addr),
           sizeof to.addr);
  }
  void sendRaw(const std::vector<uint8_t>& bytes, const Sender& to) {
    sendto(fd_, bytes.data(), bytes.size(), 0, reinterpret_cast<const sockaddr*>(&to.addr),
           sizeof to.addr);
  }

 private:
  void take(std::span<const uint8_t> d, const sockaddr_in& from) {
    wire::FrameView f;
    while (!d.empty() && wire::nextFrame(d, f) == wire::DecodeError::kNone) {
      if (f.header.kind == wire::FrameKind::kHello) {
        wire::HelloView h;
        if (wire::decodeHello(f, h) == wire::DecodeError::kNone)
          senders[f.header.sender_id] = Sender{from, h.rank, std::string(h.job)};
      } else if (f.header.kind == wire::FrameKind::kSamples) {
        wire::SamplesView s;
        if (wire::decodeSamples(f, s) != wire::DecodeError::kNone) continue;
        for (size_t i = 0; i < s.size(); ++i)
          if (s[i].metric == wire::MetricId::kAllreduceSeconds)
            allreduce_seconds.push_back(s[i].value);
      } else if (f.header.kind == wire::FrameKind::kLabelledSamples) {
        wire::LabelledSamplesView v;
        if (wire::decodeLabelledSamples(f, v) != wire::DecodeError::kNone) continue;
        size_t off = 0;
        for (size_t i = 0; i < v.count; ++i) {
          wire::LabelledRecord r = v.next(off);
          wire::LabelledMetricInfo info = wire::labelledMetricInfo(r.metric);
          std::string key(info.name);
          key += "{";
          for (size_t l = 0; l < r.label_count; ++l)
            key += (l ? "," : "") + std::string(r.labels[l]);
          key += "}";
          if (r.type == wire::SampleType::kCounter)
            values[key] += r.value;
          else
            values[key] = r.value;
          if (r.metric == wire::LabelledMetricId::kNcclTunerCalls)
            tuner_calls[f.header.sender_id] =
                std::max(tuner_calls[f.header.sender_id], uint64_t(r.value));
        }
      }
    }
  }

  int fd_ = -1;
  int port_ = 0;
};

}  // namespace bpftrain::testing::nccl
