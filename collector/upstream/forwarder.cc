#include "collector/upstream/forwarder.h"

#include <errno.h>
#include <prometheus/metric_family.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>

#include "collector/export/catalogue_family.h"
#include "common/clock.h"
#include "common/host_port.h"
#include "common/metric_catalogue.h"

namespace bpftrain::collector::upstream {
namespace {

uint64_t defaultSenderId() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  // FNV-1a of host and pid, top bit set so it never collides with a trainer's small rank-based ids.
  uint64_t h = 0xcbf29ce484222325ULL;
  std::string key = std::string(host) + "/" + std::to_string(getpid());
  for (unsigned char c : key) h = (h ^ c) * 0x100000001b3ULL;
  return h | (uint64_t{1} << 63);
}

class ForwarderCollectable : public prometheus::Collectable {
 public:
  explicit ForwarderCollectable(const UpstreamForwarder& f) : f_(f) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    UpstreamStats s = f_.stats();
    auto family = [](const metrics::MetricDef& def,
                     std::initializer_list<std::pair<const char*, uint64_t>> values) {
      prometheus::MetricFamily f = exporter::familyOf(def);
      for (auto [result, v] : values) exporter::addPoint(f, double(v), {{"result", result}});
      return f;
    };
    return {
        family(metrics::kCollectorUpstreamFrames,
               {{"sent", s.frames_sent}, {"dropped", s.frames_dropped}, {"error", s.send_errors}}),
        family(metrics::kCollectorUpstreamSeries,
               {{"sent", s.series_sent}, {"oversized", s.series_oversized}}),
        family(metrics::kCollectorUpstreamSteps,
               {{"sent", s.steps_sent}, {"missed", s.steps_missed}}),
    };
  }

 private:
  const UpstreamForwarder& f_;
};

}  // namespace

std::unique_ptr<UpstreamForwarder> UpstreamForwarder::create(const window::SeriesStore& store,
                                                             const UpstreamOptions& options,
                                                             std::string& error) {
  std::optional<SocketAddress> to =
      resolveSetting("--upstream", options.target, PortZero::kRejected, SOCK_DGRAM, error);
  if (!to) return nullptr;
  int fd = socket(to->family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0 || connect(fd, to->get(), to->length) != 0) {
    error = "--upstream " + options.target + ": " + std::strerror(errno);
    if (fd >= 0) close(fd);
    return nullptr;
  }
  if (options.sndbuf_bytes > 0)
    setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &options.sndbuf_bytes, sizeof options.sndbuf_bytes);
  uint64_t id = options.sender_id ? options.sender_id : defaultSenderId();
  return std::unique_ptr<UpstreamForwarder>(new UpstreamForwarder(store, options, fd, id));
}

std::unique_ptr<UpstreamForwarder> UpstreamForwarder::adopt(const window::SeriesStore& store,
                                                            int fd,
                                                            const UpstreamOptions& options) {
  uint64_t id = options.sender_id ? options.sender_id : defaultSenderId();
  return std::unique_ptr<UpstreamForwarder>(new UpstreamForwarder(store, options, fd, id));
}

UpstreamForwarder::UpstreamForwarder(const window::SeriesStore& store,
                                     const UpstreamOptions& options, int fd, uint64_t sender_id)
    : store_(store),
      options_(options),
      fd_(fd),
      sender_id_(sender_id),
      framer_(sender_id, [this](std::span<const uint8_t> frame) { send(frame); }) {}

UpstreamForwarder::~UpstreamForwarder() {
  stop();
  close(fd_);
}

void UpstreamForwarder::logOnce(std::atomic<bool>& flag, const std::string& line) {
  if (!flag.exchange(true))
    std::fprintf(stderr, "bpftrain-collector: upstream: %s\n", line.c_str());
}

void UpstreamForwarder::send(std::span<const uint8_t> frame) {
  ssize_t n = ::send(fd_, frame.data(), frame.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == ssize_t(frame.size())) {
    frames_sent_.fetch_add(1, std::memory_order_relaxed);
  } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == ENOBUFS)) {
    frames_dropped_.fetch_add(1, std::memory_order_relaxed);
    logOnce(logged_drop_,
            "socket full, dropping window summaries (counted in "
            "bpftrain_collector_upstream_frames_total{result=\"dropped\"})");
  } else {
    send_errors_.fetch_add(1, std::memory_order_relaxed);
    logOnce(logged_error_, "sending to " + options_.target + " failed: " + std::strerror(errno) +
                               "; is the parent collector listening there? (counted in "
                               "bpftrain_collector_upstream_frames_total{result=\"error\"})");
  }
}

size_t UpstreamForwarder::forwardStep(int64_t step) {
  std::lock_guard lock(send_mutex_);
  const int64_t step_ns = store_.config().step.count();
  framer_.begin(step, step_ns);
  size_t sent = 0;
  store_.visitStep(step, [&](const window::StepSummary& s) {
    if (framer_.add(s)) {
      ++sent;
    } else {
      series_oversized_.fetch_add(1, std::memory_order_relaxed);
      logOnce(logged_oversized_,
              "series " + std::string(s.name) +
                  " does not fit in one frame (names, labels or sketch too "
                  "large): not forwarded, counted in "
                  "bpftrain_collector_upstream_series_total{result=\"oversized\"}");
    }
  });
  framer_.flush();
  series_sent_.fetch_add(sent, std::memory_order_relaxed);
  steps_sent_.fetch_add(1, std::memory_order_relaxed);
  return sent;
}

void UpstreamForwarder::start() {
  std::lock_guard lock(mutex_);
  if (thread_.joinable()) return;
  stopping_ = false;
  // The first step to send is the one start() is called in, taken here rather than in the new
  // thread: a thread that began running a step later skipped what the caller recorded meanwhile
  // (upstream_test's BackgroundThreadForwardsEachStep saw 0 of 500 in a CI run).
  const int64_t first = store_.stepOf(monotonicNowNs());
  thread_ = std::thread([this, first] { run(first); });
}

void UpstreamForwarder::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void UpstreamForwarder::run(int64_t next) {  // next: the first step to send, once it ends
  const int64_t step_ns = std::max<int64_t>(store_.config().step.count(), 1);
  const int64_t window_steps = (store_.config().window.count() + step_ns - 1) / step_ns;
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    // steady_clock is CLOCK_MONOTONIC on Linux, the clock the store's steps are counted in.
    const int64_t due = (next + 1) * step_ns + options_.delay.count();
    const int64_t now = monotonicNowNs();
    if (now < due) {
      wake_.wait_for(lock, std::chrono::nanoseconds(due - now));
      continue;
    }
    const int64_t current = store_.stepOf(now - options_.delay.count());
    lock.unlock();
    for (; next < current; ++next) {
      if (current - next > window_steps) {
        steps_missed_.fetch_add(1, std::memory_order_relaxed);
        logOnce(logged_missed_,
                "fell behind: window steps evicted before they were forwarded "
                "(bpftrain_collector_upstream_steps_total{result=\"missed\"})");
        continue;
      }
      forwardStep(next);
    }
    lock.lock();
  }
}

UpstreamStats UpstreamForwarder::stats() const {
  UpstreamStats s;
  s.steps_sent = steps_sent_.load(std::memory_order_relaxed);
  s.steps_missed = steps_missed_.load(std::memory_order_relaxed);
  s.frames_sent = frames_sent_.load(std::memory_order_relaxed);
  s.frames_dropped = frames_dropped_.load(std::memory_order_relaxed);
  s.send_errors = send_errors_.load(std::memory_order_relaxed);
  s.series_sent = series_sent_.load(std::memory_order_relaxed);
  s.series_oversized = series_oversized_.load(std::memory_order_relaxed);
  return s;
}

std::shared_ptr<prometheus::Collectable> UpstreamForwarder::collectable() {
  return std::make_shared<ForwarderCollectable>(*this);
}

}  // namespace bpftrain::collector::upstream
