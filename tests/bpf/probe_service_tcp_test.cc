// Known-answer tests of the tcp probe through ProbeService (probe_service_fixture.h): queue depth,
// delivery rate and RTT of a target's loopback sockets against what the path carries. Root only;
// label bpf.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <thread>
#include <vector>

#include "tests/bpf/probe_service_fixture.h"
#include "tests/support/loopback.h"

namespace bpftrain::collector::loader {
namespace {

// A loopback listener in this process (not a target); the sender child is the target.
struct Listener {
  Listener(int rcvbuf) {
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
    bpftrain::testing::bindLoopbackPort0(fd, &port);
    listen(fd, 16);
  }
  ~Listener() { close(fd); }
  // Reads everything; a slow reader takes 16 KiB per 2 ms (pacing a workload, not waiting on it).
  int64_t drain(bool slow) const {
    const int conn = accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (conn < 0) return 0;
    std::vector<char> buf(slow ? 16 << 10 : 1 << 20);
    int64_t got = 0;
    for (;;) {
      const ssize_t n = read(conn, buf.data(), buf.size());
      if (n <= 0) break;
      got += n;
      if (slow) std::this_thread::sleep_for(2ms);
    }
    close(conn);
    return got;
  }
  int fd = -1;
  uint16_t port = 0;
};

// A TCP socket connected to 127.0.0.1:port, -1 on failure; `mss` > 0 caps its segments first.
int connectLoopback(uint16_t port, int mss = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (mss > 0) setsockopt(fd, IPPROTO_TCP, TCP_MAXSEG, &mss, sizeof mss);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) return fd;
  close(fd);
  return -1;
}

// Writes `bytes` unpaced from `buf` (whole buffers); false when a send fails.
bool sendUnpaced(int fd, const std::vector<char>& buf, int64_t bytes) {
  for (int64_t sent = 0; sent < bytes;) {
    const ssize_t n = send(fd, buf.data(), buf.size(), MSG_NOSIGNAL);
    if (n <= 0) return false;
    sent += n;
  }
  return true;
}

// Two senders of `pace`d 64 KiB writes into loopback readers, as ranks 0 and 1 of one fresh
// service: rank 0's reader keeps up, rank 1's takes 8 MB/s (16 KiB per 2 ms). Polls once both
// streams are done, so their samples are in the store; the service stays with the caller.
void streamIntoFastAndSlowReaders(ProbeServiceTest& test, int64_t fast_bytes, int64_t slow_bytes,
                                  std::chrono::microseconds pace,
                                  std::unique_ptr<ProbeService>& service) {
  Listener fast_listener(0), slow_listener(64 << 10);
  const uint16_t fast_port = fast_listener.port, slow_port = slow_listener.port;
  Child fast([] {}, [=] { return tests::bpf::tcpSend(fast_port, fast_bytes, pace); });
  Child slow([] {}, [=] { return tests::bpf::tcpSend(slow_port, slow_bytes, pace); });
  ASSERT_TRUE(fast.ready(5s) && slow.ready(5s));
  ProbeOptions options;
  options.pids = {fast.pid(), slow.pid()};  // rank 0 fast, rank 1 slow
  service = test.startService(options);
  ASSERT_NE(service, nullptr);
  int64_t sent = 0;
  fast.go();
  EXPECT_EQ(fast_listener.drain(false), fast_bytes);
  ASSERT_TRUE(fast.result(sent, 30s));
  slow.go();
  EXPECT_EQ(slow_listener.drain(true), slow_bytes);
  ASSERT_TRUE(slow.result(sent, 30s));
  test.pollService(*service);
}

// The delivery rate is what the path carried while the sender had data: an unpaced sender into a
// reader that keeps up (loopback at memory speed) against one into a reader taking 8 MB/s, whose
// receive window throttles it (window-limited, not application-limited: its samples count).
TEST_F(ProbeServiceTest, DeliveryRateShowsWhatThePathCarries) {
  std::unique_ptr<ProbeService> service;
  streamIntoFastAndSlowReaders(*this, 256 << 20, 6 << 20, std::chrono::microseconds(0), service);
  if (HasFatalFailure()) return;
  auto get = [&](const char* rank) {
    return series("bpftrain_transport_delivery_rate_bytes_per_second",
                  {{"job", "manual"}, {"rank", rank}, {"transport", "tcp"}, {"link", "same_host"}});
  };
  const auto fast_rate = get("0"), slow_rate = get("1");
  char seen[160];
  std::snprintf(
      seen, sizeof seen, "fast %lu samples p50 %.3g max %.3g B/s, slow %lu samples p50 %.3g B/s",
      static_cast<unsigned long>(fast_rate.count), quantile(fast_rate, 0.5), fast_rate.max,
      static_cast<unsigned long>(slow_rate.count), quantile(slow_rate, 0.5));
  std::printf("delivery rate: %s\n", seen);
  // Measured: slow 4.5e7 B/s over 18-26 samples (a rate sample spans the bursts the reader's
  // window lets out: above its 8 MB/s, far below loopback's), fast p50 2.9e9-3.4e10 over 0-16
  // samples (its reader keeps up, so most of its samples are application-limited and left out).
  ASSERT_GE(slow_rate.count, 10u) << seen;
  EXPECT_GT(quantile(slow_rate, 0.5), 1e6) << seen;
  EXPECT_LT(quantile(slow_rate, 0.5), 5e8) << "the reader takes 8 MB/s; " << seen;
  // The fast stream's fastest sample, not its median: over 1-3 samples one taken while the
  // reader (this process, on a 2-core host) was off its core reads the stall, which is what the
  // path carried then. One failure in CI (2026-12-07, stop 36) did not print which check failed.
  if (fast_rate.count > 0) {
    EXPECT_GT(fast_rate.max, 20 * quantile(slow_rate, 0.5)) << seen;
  }
}

TEST_F(ProbeServiceTest, SlowReaderQueueDepthClearlyAboveFastReader) {
  // The same application-limited sender (64 KiB per ms, ~64 MB/s) into a reader that keeps up
  // and into one that takes 8 MB/s: the slow reader's socket queues up to the send buffer.
  std::unique_ptr<ProbeService> service;
  streamIntoFastAndSlowReaders(*this, 16 << 20, 6 << 20, std::chrono::microseconds(1000), service);
  if (HasFatalFailure()) return;
  auto get = [&](const char* metric, const char* rank) {
    return series(metric, {{"job", "manual"}, {"rank", rank}, {"transport", "tcp"}});
  };
  const auto fast_depth = get("bpftrain_transport_queued_bytes", "0");
  const auto slow_depth = get("bpftrain_transport_queued_bytes", "1");
  const auto fast_inflight = get("bpftrain_transport_inflight_bytes", "0");
  const auto slow_inflight = get("bpftrain_transport_inflight_bytes", "1");
  const auto slow_rtt = get("bpftrain_transport_rtt_seconds", "1");
  std::printf("fast: %lu samples queue depth p50 %.0f p90 %.0f in flight p50 %.0f p90 %.0f\n",
              static_cast<unsigned long>(fast_depth.count), quantile(fast_depth, 0.5),
              quantile(fast_depth, 0.9), quantile(fast_inflight, 0.5),
              quantile(fast_inflight, 0.9));
  std::printf(
      "slow: %lu samples queue depth p50 %.0f p90 %.0f in flight p50 %.0f p90 %.0f rtt p50 %.6f\n",
      static_cast<unsigned long>(slow_depth.count), quantile(slow_depth, 0.5),
      quantile(slow_depth, 0.9), quantile(slow_inflight, 0.5), quantile(slow_inflight, 0.9),
      quantile(slow_rtt, 0.5));
  ASSERT_GT(fast_depth.count, 10u);
  ASSERT_GT(slow_depth.count, 10u);
  // Measured: fast p50 64 KiB (one write in flight), slow p50 ~3 MiB (the send buffer fills).
  EXPECT_GT(quantile(slow_depth, 0.5), 10 * quantile(fast_depth, 0.5));
  EXPECT_GT(quantile(slow_depth, 0.5), 1 << 20);
  EXPECT_GT(quantile(slow_rtt, 0.5), 0);
  EXPECT_EQ(total("bpftrain_probe_events_lost", {{"probe", "tcp"}}), 0);
}

// Every target socket is followed (issue 14): the owner lives in the socket's own storage, so
// there is no map to fill. A target sending on 12 connected sockets has each sampled (its first
// acknowledgement after its first send) and loses nothing. (The owner hash before it refused
// sockets past its capacity and counted their sends as lost: commit d9274ff's test, 200 of 400
// sends.)
TEST_F(ProbeServiceTest, EveryTargetSocketIsFollowedWithoutAnOwnerMapToFill) {
  constexpr int kSockets = 12, kSends = 5;  // within the listener's backlog of 16
  Listener listener(0);
  const uint16_t port = listener.port;
  auto fds = std::make_shared<std::vector<int>>();
  Child sender(
      [=] {
        for (int i = 0; i < kSockets; ++i)
          if (const int fd = connectLoopback(port); fd >= 0) fds->push_back(fd);
      },
      [=]() -> int64_t {
        if (int(fds->size()) != kSockets) return -1;
        const char byte[64] = {};
        int64_t sends = 0;
        for (int k = 0; k < kSends; ++k)
          for (int fd : *fds)
            sends += send(fd, byte, sizeof byte, MSG_NOSIGNAL) == ssize_t(sizeof byte);
        return sends;
      });
  ASSERT_TRUE(sender.ready(5s));
  ProbeOptions options;
  options.pids = {sender.pid()};
  auto service = start(options);
  ASSERT_NE(service, nullptr);
  sender.go();
  int64_t sends = 0;
  ASSERT_TRUE(sender.result(sends, 30s));
  ASSERT_EQ(sends, kSockets * kSends) << "a send failed";
  const LabelMap tcp = {{"job", "manual"}, {"rank", "0"}, {"transport", "tcp"}};
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  do {  // acknowledgements may be delayed (delayed ACK): wait for them with a deadline
    service->poll(registry_, monotonicNowNs());
    if (total("bpftrain_transport_samples", tcp) >= kSockets) break;
    std::this_thread::sleep_for(20ms);
  } while (std::chrono::steady_clock::now() < deadline);
  EXPECT_GE(total("bpftrain_transport_samples", tcp), kSockets);
  EXPECT_EQ(total("bpftrain_probe_events_lost", {{"probe", "tcp"}}), 0);
}

// A socket that only receives reports queue depth but no RTT or delivery rate: both change only
// when the peer acknowledges the socket's own data, and tcp:tcp_probe fires on every segment
// received, so they would repeat the values of the socket's last send (a ring's rank and its
// upstream neighbour; f28d read a clear phase's 36 Gbit/s through a 2 Gbit/s throttle for 4 s).
// The target sends 8 MB unpaced (fresh RTT and rate samples), then only reads a paced 20 MB
// stream from this process, during which its RTT and rate series must not grow.
TEST_F(ProbeServiceTest, AReceiveOnlySocketRepeatsNoStaleRttOrDeliveryRate) {
  constexpr int64_t kSendBytes = 8 << 20, kChunkBytes = 64 << 10;
  constexpr int kChunks = 300;
  Listener listener(0);
  const uint16_t port = listener.port;
  auto fd = std::make_shared<int>(-1);
  Child target([=] { *fd = connectLoopback(port); },
               [=]() -> int64_t {
                 std::vector<char> buf(1 << 20, 'x');
                 if (*fd < 0 || !sendUnpaced(*fd, buf, kSendBytes)) return -1;
                 int64_t got = 0;
                 for (ssize_t n; (n = read(*fd, buf.data(), buf.size())) > 0;) got += n;
                 return got;
               });
  ASSERT_TRUE(target.ready(5s));
  ProbeOptions options;
  options.pids = {target.pid()};
  auto service = start(options);
  ASSERT_NE(service, nullptr);
  target.go();
  const int conn = accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(conn, 0);
  std::vector<char> buf(kSendBytes);
  ASSERT_EQ(recv(conn, buf.data(), buf.size(), MSG_WAITALL), ssize_t(kSendBytes));
  const LabelMap tcp = {{"job", "manual"}, {"rank", "0"}, {"transport", "tcp"}};
  service->poll(registry_, monotonicNowNs());
  const uint64_t rtt_sent = series("bpftrain_transport_rtt_seconds", tcp).count;
  const uint64_t depth_sent = series("bpftrain_transport_queued_bytes", tcp).count;
  const uint64_t rate_sent = series("bpftrain_transport_delivery_rate_bytes_per_second", tcp).count;
  for (int i = 0; i < kChunks; ++i) {
    ASSERT_EQ(send(conn, buf.data(), kChunkBytes, MSG_NOSIGNAL), kChunkBytes);
    std::this_thread::sleep_for(1ms);  // pacing the stream so the target is sampled often
  }
  close(conn);
  int64_t got = 0;
  ASSERT_TRUE(target.result(got, 30s));
  ASSERT_EQ(got, kChunks * kChunkBytes);
  service->poll(registry_, monotonicNowNs());
  const uint64_t depth = series("bpftrain_transport_queued_bytes", tcp).count - depth_sent;
  const uint64_t rtt = series("bpftrain_transport_rtt_seconds", tcp).count - rtt_sent;
  const uint64_t rate =
      series("bpftrain_transport_delivery_rate_bytes_per_second", tcp).count - rate_sent;
  std::printf(
      "sending: %lu RTT, %lu delivery rate samples; receiving: %lu depth, %lu RTT, %lu rate\n",
      static_cast<unsigned long>(rtt_sent), static_cast<unsigned long>(rate_sent),
      static_cast<unsigned long>(depth), static_cast<unsigned long>(rtt),
      static_cast<unsigned long>(rate));
  ASSERT_GE(rtt_sent, 1u) << "the unpaced send was not sampled";
  ASSERT_GE(depth, 20u) << "the stream was not sampled often enough to tell";
  // The last acknowledgement of the send may arrive with the stream's first segment.
  EXPECT_LE(rtt, 2u) << "the RTT of the socket's last send was repeated while it only received";
  EXPECT_LE(rate, 2u) << "the delivery rate of its last send was repeated while it only received";
  EXPECT_EQ(total("bpftrain_probe_events_lost", {{"probe", "tcp"}}), 0);
}

// The kernel keeps "the last non-app-limited or the highest app-limited" delivery-rate sample
// (tcp_rate_gen), so a socket that sent fast and then only sends small messages (app-limited,
// slower) repeats the fast sample, marked not app-limited, at every acknowledgement: the ring's
// inter-host rate read a clear phase's 36-38 Gbit/s for 4 s through a 2 Gbit/s throttle (f28d,
// f29b). Only a new sample counts. The target sends 8 MB unpaced, then 64 bytes every 2 ms:
// its RTT goes on (acknowledged data), its delivery rate must not.
TEST_F(ProbeServiceTest, AnAppLimitedSenderRepeatsNoOlderFasterDeliveryRate) {
  constexpr int64_t kBulkBytes = 64 << 20;
  constexpr int kSmallSends = 200;
  Listener listener(0);
  const uint16_t port = listener.port;
  auto fd = std::make_shared<int>(-1);
  Child target(
      // Ethernet-sized segments, as between hosts: the bulk's rate in segments per second is
      // then far above one small message's per round trip, so the kernel keeps the bulk's.
      [=] { *fd = connectLoopback(port, 1400); },
      [=]() -> int64_t {
        std::vector<char> buf(1 << 20, 'x');
        if (*fd < 0 || !sendUnpaced(*fd, buf, kBulkBytes)) return -1;
        char go = 0;  // the test polls the bulk's samples, then lets the small sends begin
        if (read(*fd, &go, 1) != 1) return -1;
        for (int i = 0; i < kSmallSends; ++i) {
          if (send(*fd, buf.data(), 64, MSG_NOSIGNAL) != 64) return -1;
          std::this_thread::sleep_for(2ms);  // pacing: an application-limited sender
        }
        close(*fd);
        return kSmallSends;
      });
  ASSERT_TRUE(target.ready(5s));
  ProbeOptions options;
  options.pids = {target.pid()};
  auto service = start(options);
  ASSERT_NE(service, nullptr);
  target.go();
  const int conn = accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
  ASSERT_GE(conn, 0);
  std::vector<char> buf(kBulkBytes);
  ASSERT_EQ(recv(conn, buf.data(), buf.size(), MSG_WAITALL), ssize_t(kBulkBytes));
  const LabelMap tcp = {{"job", "manual"}, {"rank", "0"}, {"transport", "tcp"}};
  const char* const kRate = "bpftrain_transport_delivery_rate_bytes_per_second";
  service->poll(registry_, monotonicNowNs());
  const uint64_t rate_bulk = series(kRate, tcp).count;
  const uint64_t rtt_bulk = series("bpftrain_transport_rtt_seconds", tcp).count;
  const uint64_t depth_bulk = series("bpftrain_transport_queued_bytes", tcp).count;
  ASSERT_EQ(send(conn, "g", 1, MSG_NOSIGNAL), 1);
  int64_t small = 0;
  for (ssize_t n; (n = read(conn, buf.data(), buf.size())) > 0;) small += n;
  close(conn);
  int64_t sends = 0;
  ASSERT_TRUE(target.result(sends, 30s));
  ASSERT_EQ(sends, kSmallSends);
  ASSERT_EQ(small, 64 * kSmallSends);
  service->poll(registry_, monotonicNowNs());
  const uint64_t rate = series(kRate, tcp).count - rate_bulk;
  const uint64_t rtt = series("bpftrain_transport_rtt_seconds", tcp).count - rtt_bulk;
  const uint64_t depth = series("bpftrain_transport_queued_bytes", tcp).count - depth_bulk;
  std::printf("bulk: %lu rate samples; small sends: %lu depth, %lu RTT, %lu rate\n",
              static_cast<unsigned long>(rate_bulk), static_cast<unsigned long>(depth),
              static_cast<unsigned long>(rtt), static_cast<unsigned long>(rate));
  ASSERT_GE(rate_bulk, 1u) << "the unpaced send gave no delivery rate to repeat";
  ASSERT_GE(rtt, 20u) << "the small sends were not sampled often enough to tell";
  EXPECT_LE(rate, 2u) << "the bulk's faster rate sample was repeated";
  EXPECT_EQ(total("bpftrain_probe_events_lost", {{"probe", "tcp"}}), 0);
}

}  // namespace
}  // namespace bpftrain::collector::loader
