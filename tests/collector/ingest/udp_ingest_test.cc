#include "collector/ingest/udp_ingest.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <thread>

#include "tests/collector/ingest/fake_store.h"

namespace bpftrain::collector::ingest {
namespace {

using testing::FakeStore;

bool waitFor(const std::function<bool()>& cond,
             std::chrono::seconds limit = std::chrono::seconds(10)) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return cond();
}

class Sender {
 public:
  explicit Sender(uint16_t port) {
    fd_ = socket(AF_INET, SOCK_DGRAM, 0);
    addr_.sin_family = AF_INET;
    addr_.sin_port = htons(port);
    inet_pton(AF_INET, "127.0.0.1", &addr_.sin_addr);
  }
  ~Sender() { close(fd_); }
  void send(std::string_view s) {
    ASSERT_EQ(sendto(fd_, s.data(), s.size(), 0, reinterpret_cast<sockaddr*>(&addr_), sizeof addr_),
              ssize_t(s.size()));
  }

 private:
  int fd_;
  sockaddr_in addr_{};
};

IngestTotals totals(const UdpIngest& in) {
  IngestTotals t;
  for (const auto& s : in.stats()) t.add(*s);
  return t;
}

TEST(UdpIngestTest, PortZeroSharedByAllSocketsAndEveryDatagramCounted) {
  FakeStore store;
  SenderRegistry registry;
  UdpIngestOptions opt;
  opt.port = 0;
  opt.threads = 3;
  std::string error;
  auto in = UdpIngest::start(opt, store, registry, error);
  ASSERT_TRUE(in) << error;
  ASSERT_NE(in->port(), 0);
  EXPECT_EQ(in->threads(), 3);
  EXPECT_GT(in->rcvbufBytes(), 0);
  // Many source ports so SO_REUSEPORT spreads them over the sockets.
  constexpr int kSenders = 16, kPer = 50;
  for (int s = 0; s < kSenders; ++s) {
    Sender tx(in->port());
    for (int i = 0; i < kPer; ++i) tx.send("udp.test:1|c\nudp.ms:" + std::to_string(i) + "|ms");
  }
  ASSERT_TRUE(waitFor([&] {
    return totals(*in).samples[size_t(Protocol::kStatsd)] == 2 * kSenders * kPer;
  })) << totals(*in).samples[size_t(Protocol::kStatsd)];
  EXPECT_EQ(store.get("udp_test{}").sum(), double(kSenders * kPer));
  EXPECT_EQ(totals(*in).kernel_drops, 0u);
  int busy = 0;
  for (const auto& st : in->stats()) busy += st->datagrams.load() > 0;
  EXPECT_GE(busy, 2) << "SO_REUSEPORT should spread 16 flows over more than one socket";
  in->stop();
}

TEST(UdpIngestTest, SecondCollectorOnSamePortWithoutReuseIsRejectedWithHint) {
  int fd = socket(AF_INET, SOCK_DGRAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  FakeStore store;
  SenderRegistry registry;
  UdpIngestOptions opt;
  opt.port = ntohs(a.sin_port);
  std::string error;
  EXPECT_FALSE(UdpIngest::start(opt, store, registry, error));
  EXPECT_NE(error.find("pick another port"), std::string::npos) << error;
  opt.host = "not-an-ip";
  EXPECT_FALSE(UdpIngest::start(opt, store, registry, error));
  // A host name is valid HOST:PORT grammar (common/host_port.h); one that does not resolve is
  // rejected naming the flag and the host.
  EXPECT_NE(error.find("--listen: cannot resolve \"not-an-ip\""), std::string::npos) << error;
  close(fd);
}

// A stalled consumer with a tiny receive buffer overflows it: every datagram is either
// processed or reported by SO_RXQ_OVFL, nothing vanishes silently.
TEST(UdpIngestTest, KernelDropsAreCountedExactly) {
  FakeStore store;
  SenderRegistry registry;
  UdpIngestOptions opt;
  opt.port = 0;
  opt.threads = 1;
  opt.rcvbuf_bytes = 4096;
  std::string error;
  auto in = UdpIngest::start(opt, store, registry, error);
  ASSERT_TRUE(in) << error;
  constexpr int kSent = 2000;
  Sender tx(in->port());
  {
    std::unique_lock stall(store.mutex());  // the ingest thread blocks in lookup()/record()
    for (int i = 0; i < kSent; ++i) tx.send("drop.test:1|c");
  }
  // The kernel reports the drop count with the next datagram it queues, so keep sending one
  // more until every datagram is accounted for as either processed or dropped.
  uint64_t sent = kSent;
  ASSERT_TRUE(waitFor([&] {
    IngestTotals t = totals(*in);
    if (t.datagrams + t.kernel_drops == sent) return true;
    tx.send("drop.test:1|c");
    ++sent;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return false;
  })) << totals(*in).datagrams
      << " + " << totals(*in).kernel_drops << " != " << sent;
  EXPECT_GT(totals(*in).kernel_drops, 0u);
  EXPECT_EQ(store.get("drop_test{}").sum(), double(totals(*in).samples[size_t(Protocol::kStatsd)]));
}

}  // namespace
}  // namespace bpftrain::collector::ingest
