// netlab-telemetry-sink: receives the trainer's binary telemetry (common/wire_format.h) on a UDP
// address and prints one JSON line per samples frame with the fields a scenario measurement
// needs, stamped with the receive wall clock:
//   {"wall_ns": N, "rank": R, "step": S, "samples_per_s": X, "topology": T, "epoch": E, ...}
// Usage: netlab-telemetry-sink ADDR:PORT [--seconds S] [--forward ADDR:PORT]   (port 0: the bound
// port is printed first as {"listening": PORT}). --forward re-sends every datagram unchanged (to
// a collector). Stops on SIGTERM/SIGINT or after S seconds.
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <unordered_map>

#include "common/clock.h"
#include "common/host_port.h"
#include "common/wire_format.h"

namespace {

volatile sig_atomic_t g_stop = 0;
void onSignal(int) { g_stop = 1; }

}  // namespace

int main(int argc, char** argv) {
  using namespace bpftrain::wire;
  if (argc < 2) {
    std::fprintf(stderr, "usage: netlab-telemetry-sink ADDR:PORT [--seconds S]\n");
    return 2;
  }
  std::string addr = argv[1];
  double seconds = 0;
  std::string forward;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--seconds") seconds = std::atof(argv[i + 1]);
    if (std::string(argv[i]) == "--forward") forward = argv[i + 1];
  }
  // HOST:PORT as every binary reads it (common/host_port.h); port 0 only for the listening side.
  auto resolve = [](const std::string& s, bpftrain::PortZero zero) {
    std::string error;
    std::optional<bpftrain::SocketAddress> out =
        bpftrain::resolveSetting(s, s, zero, SOCK_DGRAM, error);
    if (!out) std::fprintf(stderr, "netlab-telemetry-sink: %s\n", error.c_str());
    return out;
  };
  std::optional<bpftrain::SocketAddress> a = resolve(addr, bpftrain::PortZero::kAllowed), fwd;
  if (!a || (!forward.empty() && !(fwd = resolve(forward, bpftrain::PortZero::kRejected))))
    return 2;
  int fwd_fd = forward.empty() ? -1 : socket(fwd->family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int fd = socket(a->family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  int rcvbuf = 8 << 20;
  setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &rcvbuf, sizeof rcvbuf);
  if (bind(fd, a->get(), a->length) != 0) {
    std::fprintf(stderr, "netlab-telemetry-sink: bind %s: %s\n", addr.c_str(),
                 std::strerror(errno));
    return 1;
  }
  std::printf("{\"listening\": %u}\n", bpftrain::boundAddress(fd).value_or(*a).port());
  std::fflush(stdout);
  signal(SIGTERM, onSignal);
  signal(SIGINT, onSignal);

  std::unordered_map<uint64_t, uint32_t> rank_of;  // sender id -> rank, from hellos
  std::array<uint8_t, kMaxDatagramSize> buf{};
  auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (!g_stop && (seconds <= 0 || std::chrono::steady_clock::now() < end)) {
    pollfd p{fd, POLLIN, 0};
    if (poll(&p, 1, 200) <= 0) continue;
    ssize_t n = recv(fd, buf.data(), buf.size(), 0);
    if (n <= 0) continue;
    uint64_t now = bpftrain::realtimeNowNs();
    if (fwd_fd >= 0) sendto(fwd_fd, buf.data(), size_t(n), MSG_DONTWAIT, fwd->get(), fwd->length);
    std::span<const uint8_t> d(buf.data(), size_t(n));
    FrameView f;
    while (!d.empty() && nextFrame(d, f) == DecodeError::kNone) {
      if (f.header.kind == FrameKind::kHello) {
        HelloView h;
        if (decodeHello(f, h) == DecodeError::kNone) rank_of[f.header.sender_id] = h.rank;
        continue;
      }
      if (f.header.kind != FrameKind::kSamples) continue;
      auto it = rank_of.find(f.header.sender_id);
      if (it == rank_of.end()) continue;
      SamplesView s;
      if (decodeSamples(f, s) != DecodeError::kNone) continue;
      std::string line =
          "{\"wall_ns\": " + std::to_string(now) + ", \"rank\": " + std::to_string(it->second);
      for (size_t i = 0; i < s.size(); ++i) {
        SampleRecord r = s[i];
        const char* key = nullptr;
        switch (r.metric) {
          case MetricId::kStep:
            key = "step";
            break;
          case MetricId::kSamplesPerSecond:
            key = "samples_per_s";
            break;
          case MetricId::kTopology:
            key = "topology";
            break;
          case MetricId::kPinning:
            key = "pinning";
            break;
          case MetricId::kConfigEpoch:
            key = "epoch";
            break;
          case MetricId::kStepSeconds:
            key = "step_s";
            break;
          case MetricId::kAllreduceSeconds:
            key = "allreduce_s";
            break;
          case MetricId::kAllreduceBusbwBytesPerSecond:
            key = "busbw";
            break;
          case MetricId::kCheckpointActive:
            key = "checkpoint";
            break;
          default:
            break;
        }
        if (key == nullptr || !std::isfinite(r.value)) continue;
        char v[64];
        std::snprintf(v, sizeof v, ", \"%s\": %.9g", key, r.value);
        line += v;
      }
      line += "}\n";
      std::fputs(line.c_str(), stdout);
    }
  }
  std::fflush(stdout);
  close(fd);
  return 0;
}
