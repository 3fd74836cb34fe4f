#include "collector/ingest/udp_ingest.h"

#include <poll.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "common/clock.h"
#include "common/host_port.h"

namespace bpftrain::collector::ingest {
namespace {

constexpr int kBatch = 64;                                  // datagrams per recvmmsg
constexpr size_t kBufferSize = wire::kMaxDatagramSize + 1;  // +1 to see MSG_TRUNC on loopback
constexpr int kPollMs = 100;  // how quickly stop() is noticed when idle

std::string errnoText(const char* what) { return std::string(what) + ": " + std::strerror(errno); }

}  // namespace

struct UdpIngest::Worker {
  int fd = -1;
  std::unique_ptr<Dispatcher> dispatcher;
  IngestStats* stats = nullptr;
  std::thread thread;
  uint32_t last_ovfl = 0;  // SO_RXQ_OVFL is a running per-socket count
  int index = 0;
  ~Worker() {
    if (fd >= 0) close(fd);
  }
};

void IngestTotals::add(const IngestStats& s) {
  auto ld = [](const std::atomic<uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  for (size_t i = 0; i < size_t(Protocol::kCount); ++i) samples[i] += ld(s.samples[i]);
  for (size_t i = 0; i < size_t(DecodeReason::kCount); ++i)
    decode_errors[i] += ld(s.decode_errors[i]);
  for (size_t i = 0; i < size_t(DropReason::kCount); ++i) dropped[i] += ld(s.dropped[i]);
  for (size_t i = 0; i < size_t(IgnoredReason::kCount); ++i) ignored[i] += ld(s.ignored[i]);
  frames_lost += ld(s.frames_lost);
  kernel_drops += ld(s.kernel_drops);
  datagrams += ld(s.datagrams);
  bytes += ld(s.bytes);
}

std::unique_ptr<UdpIngest> UdpIngest::start(const UdpIngestOptions& options,
                                            window::SeriesStore& store, SenderRegistry& registry,
                                            std::string& error) {
  std::unique_ptr<UdpIngest> self(new UdpIngest());
  std::optional<SocketAddress> resolved =
      resolveHostPort(HostPort{options.host, options.port}, SOCK_DGRAM, error);
  if (!resolved) {
    error = "--listen: " + error;
    return nullptr;
  }
  SocketAddress addr = *resolved;
  uint16_t port = options.port;
  int threads = std::max(1, options.threads);
  // One StatsD state for all threads: gauges and sets written through any socket agree.
  DispatchOptions dispatch = options.dispatch;
  if (!dispatch.statsd_state) dispatch.statsd_state = std::make_shared<StatsdState>(store.config());
  for (int i = 0; i < threads; ++i) {
    auto w = std::make_unique<Worker>();
    w->index = i;
    w->fd = socket(addr.family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (w->fd < 0) {
      error = errnoText("socket");
      return nullptr;
    }
    int one = 1;
    setsockopt(w->fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one);
    setsockopt(w->fd, SOL_SOCKET, SO_RXQ_OVFL, &one, sizeof one);
    // SO_RCVBUFFORCE ignores net.core.rmem_max but needs CAP_NET_ADMIN; fall back quietly.
    int want = options.rcvbuf_bytes;
    bool forced = setsockopt(w->fd, SOL_SOCKET, SO_RCVBUFFORCE, &want, sizeof want) == 0;
    if (!forced) setsockopt(w->fd, SOL_SOCKET, SO_RCVBUF, &want, sizeof want);
    int got = 0;
    socklen_t len = sizeof got;
    getsockopt(w->fd, SOL_SOCKET, SO_RCVBUF, &got, &len);
    self->rcvbuf_bytes_ = got;
    self->rcvbuf_forced_ = forced;
    addr.setPort(port);
    if (bind(w->fd, addr.get(), addr.length) != 0) {
      error =
          "--listen " + HostPort{options.host, port}.str() + ": " + std::strerror(errno) +
          (errno == EADDRINUSE ? " (another collector running? pick another port or use :0)" : "");
      return nullptr;
    }
    // Port 0: the rest join the port the kernel chose.
    if (i == 0) port = boundAddress(w->fd).value_or(addr).port();
    self->stats_.push_back(std::make_unique<IngestStats>());
    w->stats = self->stats_.back().get();
    w->dispatcher = std::make_unique<Dispatcher>(store, registry, *w->stats,
                                                 options.first_writer + i, dispatch);
    self->workers_.push_back(std::move(w));
  }
  self->port_ = port;
  for (auto& w : self->workers_) {
    Worker* wp = w.get();
    UdpIngest* sp = self.get();
    w->thread = std::thread([sp, wp] { sp->run(*wp); });
  }
  return self;
}

UdpIngest::~UdpIngest() { stop(); }

bool UdpIngest::sendTo(const SocketAddress& to, std::span<const uint8_t> datagram,
                       std::string& error) {
  if (workers_.empty() || to.length == 0) {
    error = "no ingest socket or no address to send to";
    return false;
  }
  ssize_t n =
      sendto(workers_[0]->fd, datagram.data(), datagram.size(), MSG_DONTWAIT, to.get(), to.length);
  if (n == ssize_t(datagram.size())) return true;
  error = "send to " + to.str() + ": " + (n < 0 ? std::strerror(errno) : "short write");
  return false;
}

void UdpIngest::stop() {
  stopping_.store(true);
  for (auto& w : workers_) {
    if (w->thread.joinable()) w->thread.join();
  }
}

void UdpIngest::run(Worker& w) {
  // Named so top/perf and the latency benchmark's scheduler accounting can find them.
  char name[16];
  std::snprintf(name, sizeof name, "ingest-%d", w.index);
  pthread_setname_np(pthread_self(), name);
  // All buffers are allocated once per thread; the loop below allocates nothing.
  std::vector<uint8_t> storage(size_t(kBatch) * kBufferSize);
  mmsghdr msgs[kBatch];
  iovec iovs[kBatch];
  alignas(cmsghdr) char control[kBatch][CMSG_SPACE(sizeof(uint32_t))];
  SocketAddress from[kBatch];
  auto reset = [&](int i) {
    iovs[i] = iovec{storage.data() + size_t(i) * kBufferSize, kBufferSize};
    msgs[i].msg_hdr = msghdr{};
    msgs[i].msg_hdr.msg_name = &from[i].storage;
    msgs[i].msg_hdr.msg_namelen = sizeof from[i].storage;
    msgs[i].msg_hdr.msg_iov = &iovs[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_hdr.msg_control = control[i];
    msgs[i].msg_hdr.msg_controllen = sizeof control[i];
    msgs[i].msg_len = 0;
  };
  for (int i = 0; i < kBatch; ++i) reset(i);
  pollfd pfd{w.fd, POLLIN, 0};
  while (!stopping_.load(std::memory_order_relaxed)) {
    // Thread 0 refreshes the StatsD sets' gauges once per window step (it wakes every kPollMs).
    if (w.index == 0) w.dispatcher->tick(monotonicNowNs());
    int n = recvmmsg(w.fd, msgs, kBatch, MSG_DONTWAIT, nullptr);
    if (n <= 0) {
      if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) break;
      poll(&pfd, 1, kPollMs);
      continue;
    }
    int64_t now = monotonicNowNs();
    for (int i = 0; i < n; ++i) {
      msghdr& h = msgs[i].msg_hdr;
      for (cmsghdr* c = CMSG_FIRSTHDR(&h); c != nullptr; c = CMSG_NXTHDR(&h, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SO_RXQ_OVFL) {
          uint32_t ovfl;
          std::memcpy(&ovfl, CMSG_DATA(c), sizeof ovfl);
          if (ovfl != w.last_ovfl) {
            IngestStats::bump(w.stats->kernel_drops, uint32_t(ovfl - w.last_ovfl));
            w.last_ovfl = ovfl;
          }
        }
      }
      if (h.msg_flags & MSG_TRUNC) {
        w.stats->error(DecodeReason::kOversized);
      } else {
        from[i].length = h.msg_namelen;
        w.dispatcher->handleDatagram(
            std::span<const uint8_t>(static_cast<const uint8_t*>(iovs[i].iov_base),
                                     msgs[i].msg_len),
            now, &from[i]);
      }
      reset(i);
    }
  }
}

}  // namespace bpftrain::collector::ingest
