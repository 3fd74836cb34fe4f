#include "trainer/telemetry/emitter.h"

#include <pthread.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <optional>
#include <stdexcept>

#include "common/clock.h"
#include "common/host_port.h"

namespace bpftrain::trainer::telemetry {

Emitter::Emitter(const EmitterOptions& options) : options_(options) {
  if (options_.hz < 1 || options_.hz > 100)
    throw std::runtime_error("--metrics-hz " + std::to_string(options_.hz) + ": must be 1..100");
  if (options_.node.empty()) {
    char host[256] = {};
    gethostname(host, sizeof(host) - 1);
    options_.node = wire::isValidName(host) ? host : "node";
  }
  std::string error;
  std::optional<SocketAddress> to =
      resolveSetting("--collector", options_.collector, PortZero::kRejected, SOCK_DGRAM, error);
  if (!to) throw std::runtime_error(error);
  fd_ = socket(to->family(), SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd_ < 0 || connect(fd_, to->get(), to->length) != 0) {
    std::string why = std::strerror(errno);
    if (fd_ >= 0) close(fd_);
    throw std::runtime_error("--collector " + options_.collector + ": " + why);
  }
  if (getrandom(&sender_id_, sizeof(sender_id_), 0) != sizeof(sender_id_))
    sender_id_ = (uint64_t(getpid()) << 32) ^ realtimeNowNs();
  buffer_.resize(wire::kMaxFrameSize);
  records_.resize(wire::kMaxSamplesPerFrame);
  ring_.resize(options_.ring_capacity);
  for (auto& s : gauge_set_) s.store(false);
  for (auto& c : counters_) c.store(0);
}

Emitter::~Emitter() {
  stop();
  if (fd_ >= 0) close(fd_);
}

void Emitter::start() {
  if (thread_.joinable()) return;
  stop_ = false;
  thread_ = std::thread([this] { run(); });
  while (thread_tid_.load() == 0) std::this_thread::yield();
}

void Emitter::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void Emitter::pushStep(const StepRecord& r) {
  uint64_t head = head_.load(std::memory_order_relaxed);
  if (head - tail_.load(std::memory_order_acquire) >= ring_.size()) {
    dropped_.fetch_add(4, std::memory_order_relaxed);  // the four samples of the record
    return;
  }
  ring_[head % ring_.size()] = r;
  head_.store(head + 1, std::memory_order_release);
}

void Emitter::setGauge(wire::MetricId id, double value) {
  size_t i = size_t(id);
  if (i >= kGaugeSlots) return;
  gauges_[i].store(value, std::memory_order_relaxed);
  // A checkpoint shorter than a tick would otherwise never be seen: latch it until sent.
  if (id == wire::MetricId::kCheckpointActive && value != 0)
    checkpoint_latched_.store(true, std::memory_order_relaxed);
  gauge_set_[i].store(true, std::memory_order_release);
}

void Emitter::stepStarted(uint64_t monotonic_ns, double samples) {
  step_samples_.store(samples, std::memory_order_relaxed);
  step_started_ns_.store(monotonic_ns, std::memory_order_release);
}

void Emitter::stepEnded() { step_started_ns_.store(0, std::memory_order_release); }

double Emitter::samplesPerSecondNow(double last_step_rate, uint64_t monotonic_now_ns) const {
  const uint64_t started = step_started_ns_.load(std::memory_order_acquire);
  if (started == 0 || monotonic_now_ns <= started) return last_step_rate;
  const double running =
      step_samples_.load(std::memory_order_relaxed) / (double(monotonic_now_ns - started) * 1e-9);
  return std::min(last_step_rate, running);
}

void Emitter::addCounter(wire::MetricId id, double delta) {
  size_t i = size_t(id);
  if (i < kGaugeSlots) counters_[i].fetch_add(delta, std::memory_order_relaxed);
}

void Emitter::setThreads(const std::vector<pid_t>& tids) {
  std::lock_guard<std::mutex> lock(tids_mutex_);
  tids_.assign(tids.begin(), tids.end());
  if (tids_.size() > wire::kMaxTids) tids_.resize(wire::kMaxTids);
  tids_changed_ = true;
}

void Emitter::run() {
  pthread_setname_np(pthread_self(), "bt-telemetry");
  thread_tid_ = pid_t(syscall(SYS_gettid));
  const auto period = std::chrono::microseconds(1'000'000 / options_.hz);
  auto next = std::chrono::steady_clock::now();
  tick(true);
  std::unique_lock<std::mutex> lock(wake_mutex_);
  while (!stop_) {
    next += period;
    wake_.wait_until(lock, next, [this] { return stop_.load(); });
    lock.unlock();
    tick(false);
    lock.lock();
    auto now = std::chrono::steady_clock::now();
    if (now > next + period) next = now;  // fell behind (suspended): do not burst
  }
}

bool Emitter::sendDatagram(size_t len) {
  ssize_t n = send(fd_, buffer_.data(), len, MSG_DONTWAIT | MSG_NOSIGNAL);
  if (n == ssize_t(len)) {
    frames_sent_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  return false;  // EAGAIN (full), ECONNREFUSED (no collector yet): drop, never wait
}

void Emitter::sendHello() {
  {
    std::lock_guard<std::mutex> lock(tids_mutex_);
    tids_copy_ = tids_;  // same capacity after the first time
  }
  wire::Hello h;
  h.job = options_.job;
  h.node = options_.node;
  h.rank = options_.rank;
  h.world = options_.world;
  h.pid = uint32_t(getpid());
  h.tids = tids_copy_;
  size_t len = wire::encodeHello(buffer_, sender_id_, sequence_++, h);
  if (len > 0) sendDatagram(len);
  last_hello_ = std::chrono::steady_clock::now();
}

void Emitter::tick(bool force_hello) {
  auto now = std::chrono::steady_clock::now();
  if (force_hello || tids_changed_.exchange(false) || now - last_hello_ >= options_.hello_every)
    sendHello();
  flushRecords(realtimeNowNs());
}

void Emitter::flushRecords(uint64_t now_ns) {
  uint64_t tail = tail_.load(std::memory_order_relaxed);
  const uint64_t head = head_.load(std::memory_order_acquire);
  size_t n = 0;
  uint64_t base = 0;
  auto flush = [&] {
    if (n == 0) return;
    size_t len = wire::encodeSamples(buffer_, sender_id_, sequence_++, base,
                                     std::span<const wire::SampleRecord>(records_.data(), n));
    if (len == 0 || !sendDatagram(len)) dropped_.fetch_add(n, std::memory_order_relaxed);
    n = 0;
  };
  auto add = [&](wire::MetricId id, wire::SampleType type, uint64_t ts, double v) {
    if (n == 0) base = ts;
    if (n == records_.size() || ts < base || ts - base > 4'000'000'000'000ull) {
      flush();
      base = ts;
    }
    wire::SampleRecord& r = records_[n++];
    r.metric = id;
    r.type = type;
    r.offset_us = uint32_t((ts - base) / 1000);
    r.value = v;
  };
  using wire::MetricId;
  using wire::SampleType;
  for (; tail != head; ++tail) {
    const StepRecord& s = ring_[tail % ring_.size()];
    add(MetricId::kStepSeconds, SampleType::kTimer, s.timestamp_ns, s.step_seconds);
    if (s.ring_probe_seconds >= 0)
      add(MetricId::kRingProbeSeconds, SampleType::kTimer, s.timestamp_ns, s.ring_probe_seconds);
    if (!options_.report_allreduce) continue;
    add(MetricId::kAllreduceSeconds, SampleType::kTimer, s.timestamp_ns, s.allreduce_seconds);
    add(MetricId::kAllreduceBytes, SampleType::kCounter, s.timestamp_ns, s.allreduce_bytes);
    add(MetricId::kAllreduceBusbwBytesPerSecond, SampleType::kGauge, s.timestamp_ns, s.busbw);
  }
  tail_.store(tail, std::memory_order_release);
  if (n > 0 && now_ns < base) now_ns = base;
  for (size_t i = 1; i < kGaugeSlots; ++i) {
    if (!gauge_set_[i].load(std::memory_order_acquire)) continue;
    auto id = MetricId(i);
    if (id == MetricId::kStepSeconds || id == MetricId::kAllreduceSeconds ||
        id == MetricId::kAllreduceBytes || id == MetricId::kAllreduceBusbwBytesPerSecond ||
        id == MetricId::kTelemetryDropped)
      continue;
    double v = gauges_[i].load(std::memory_order_relaxed);
    if (id == MetricId::kCheckpointActive && checkpoint_latched_.exchange(false)) v = 1;
    if (id == MetricId::kSamplesPerSecond) v = samplesPerSecondNow(v, uint64_t(monotonicNowNs()));
    add(id, SampleType::kGauge, now_ns, v);
  }
  for (size_t i = 1; i < kGaugeSlots; ++i) {
    double delta = counters_[i].exchange(0, std::memory_order_relaxed);
    if (delta != 0) add(MetricId(i), SampleType::kCounter, now_ns, delta);
  }
  // Drops are reported as a counter increment; what this very report loses is counted next tick.
  static_assert(sizeof(uint64_t) == 8);
  uint64_t dropped = dropped_.load(std::memory_order_relaxed);
  add(MetricId::kTelemetryDropped, SampleType::kCounter, now_ns,
      double(dropped - reported_dropped_));
  reported_dropped_ = dropped;
  flush();
}

}  // namespace bpftrain::trainer::telemetry
