#include "plugins/nccl/agent.h"

#include <dirent.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <optional>

#include "common/clock.h"
#include "common/hmac.h"
#include "common/host_port.h"
#include "common/wire_format.h"

namespace bpftrain::nccl_plugin {
namespace {

constexpr uint64_t kHelloEveryNs = 1'000'000'000;
constexpr uint64_t kQuietNs = 50'000'000;    // a collective without KernelCh events is done
constexpr size_t kMaxTimersPerFlush = 2000;  // per-collective time samples; counters stay exact

// nccl-tests bus bandwidth factors: what each rank's links carry relative to the data size.
double busFactor(uint8_t func, int nranks) {
  if (nranks <= 1) return 1;
  double n = nranks;
  switch (func) {
    case 4:  // allreduce
      return 2 * (n - 1) / n;
    case 2:  // allgather
    case 3:  // reducescatter
    case 5:  // alltoall
      return (n - 1) / n;
    default:
      return 1;
  }
}

std::string hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

std::vector<uint32_t> threadIds() {
  std::vector<uint32_t> tids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) {
      char* end = nullptr;
      unsigned long t = std::strtoul(e->d_name, &end, 10);
      if (end != e->d_name && *end == '\0' && tids.size() < wire::kMaxTids) tids.push_back(t);
    }
    closedir(d);
  }
  return tids;
}

// Labelled frames, cut whenever one is full.
class LabelledSender {
 public:
  LabelledSender(std::function<void(std::span<const uint8_t>)> send,
                 std::function<uint32_t()> sequence, uint64_t sender)
      : send_(std::move(send)), sequence_(std::move(sequence)), sender_(sender) {
    reset();
  }
  void add(wire::LabelledMetricId id, double value, std::initializer_list<std::string_view> l) {
    wire::LabelledRecord r;
    r.metric = id;
    r.type = wire::labelledMetricInfo(id).type;
    r.value = value;
    for (std::string_view v : l) r.labels[r.label_count++] = v;
    if (builder_->add(r)) return;
    finish();
    builder_->add(r);
  }
  void finish() {
    if (builder_->count() > 0) {
      size_t n = builder_->finish(sender_, sequence_(), uint64_t(realtimeNowNs()));
      send_(std::span<const uint8_t>(buf_.data(), n));
    }
    reset();
  }

 private:
  void reset() { builder_.emplace(std::span<uint8_t>(buf_.data(), buf_.size())); }
  std::function<void(std::span<const uint8_t>)> send_;
  std::function<uint32_t()> sequence_;
  uint64_t sender_;
  std::array<uint8_t, wire::kMaxFrameSize> buf_{};
  std::optional<wire::LabelledFrameBuilder> builder_;
};

}  // namespace

Agent::Agent(ProfilerCore& profiler, Tuner& tuner, DecisionBoard& board)
    : profiler_(profiler), tuner_(tuner), board_(board) {}

Agent::~Agent() {
  // Threads cannot be joined from a library destructor safely at exit; NCCL finalizes first.
  if (thread_.joinable()) thread_.detach();
}

void Agent::log(abi::ncclDebugLogLevel level, const std::string& text) {
  if (logger_ != nullptr)
    logger_(level, abi::kNcclInit, "bpftrain", 0, "bpftrain plugin: %s", text.c_str());
}

void Agent::acquire(abi::ncclDebugLogger_t logger, int rank, int nranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (logger_ == nullptr) logger_ = logger;
  if (rank >= 0 && comm_rank_.load() < 0) {
    comm_nranks_.store(nranks);
    comm_rank_.store(rank);
  }
  if (users_++ == 0) start();
}

void Agent::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (users_ > 0 && --users_ == 0) stop();
}

void Agent::start() {
  config_ = AgentConfig::fromEnvironment();
  for (const std::string& w : config_.warnings) log(abi::NCCL_LOG_WARN, w);
  std::string secret;
  if (!config_.secret_file.empty()) {
    std::string error;
    if (auto s = readSecretFile(config_.secret_file, error))
      secret = *s;
    else
      log(abi::NCCL_LOG_WARN, "tuner decisions refused: " + error);
  }
  verifier_ = std::make_unique<DecisionVerifier>(config_.job, secret);
  if (getrandom(&sender_id_, sizeof sender_id_, GRND_NONBLOCK) != sizeof sender_id_)
    sender_id_ = uint64_t(getpid()) << 32 ^ uint64_t(monotonicNowNs());
  rank_ = config_.rank;
  links_seen_.clear();
  drops_seen_.fill(0);
  refusals_seen_.fill(0);
  if (config_.collector == "off") {
    log(abi::NCCL_LOG_INFO, "BPFTRAIN_COLLECTOR=off: sending nothing, no tuner decisions");
    return;
  }
  std::string error;
  auto addr = resolveSetting("BPFTRAIN_COLLECTOR", config_.collector, PortZero::kRejected,
                             SOCK_DGRAM, error);
  if (!addr) {
    log(abi::NCCL_LOG_WARN, error + "; sending nothing");
    return;
  }
  fd_ = socket(addr->family(), SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd_ < 0 || connect(fd_, addr->get(), addr->length) != 0) {
    log(abi::NCCL_LOG_WARN, "cannot open a UDP socket to " + config_.collector);
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
    return;
  }
  wake_fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  log(abi::NCCL_LOG_INFO, "sending to " + config_.collector + " as job " + config_.job +
                              (rank_ >= 0 ? " rank " + std::to_string(rank_) : "") +
                              (secret.empty() ? "; tuner decisions off (no BPFTRAIN_SECRET_FILE)"
                                              : "; tuner decisions on"));
  thread_ = std::thread([this] { run(); });
}

void Agent::stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    if (write(wake_fd_, &one, sizeof one) < 0) {
    }
    thread_.join();
  }
  if (fd_ >= 0) ::close(fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
  fd_ = wake_fd_ = -1;
}

void Agent::run() {
  uint64_t next_flush = uint64_t(monotonicNowNs());
  for (;;) {
    uint64_t now = uint64_t(monotonicNowNs());
    if (now >= next_flush) {
      flush();
      next_flush = now + config_.flush_ns;
    }
    pollfd fds[2] = {{fd_, POLLIN, 0}, {wake_fd_, POLLIN, 0}};
    int timeout_ms = int((next_flush - std::min(next_flush, now)) / 1'000'000) + 1;
    if (poll(fds, 2, timeout_ms) < 0) continue;
    if (fds[0].revents & POLLIN) receive();
    if (fds[1].revents & POLLIN) {
      profiler_.sweep(0);  // the last communicator is gone: nothing more will arrive
      flush();
      return;
    }
  }
}

void Agent::receive() {
  std::array<uint8_t, wire::kMaxDatagramSize> buf;
  for (int i = 0; i < 64; ++i) {
    ssize_t n = recv(fd_, buf.data(), buf.size(), MSG_DONTWAIT);
    if (n <= 0) return;  // empty, or ECONNREFUSED from an absent collector
    uint64_t before = verifier_->accepted();
    verifier_->verify(std::span<const uint8_t>(buf.data(), size_t(n)), realtimeNowNs(), board_);
    if (verifier_->accepted() > before) log(abi::NCCL_LOG_INFO, "tuner decision accepted");
  }
}

void Agent::send(std::span<const uint8_t> frame) {
  if (fd_ >= 0 && !frame.empty()) ::send(fd_, frame.data(), frame.size(), MSG_DONTWAIT);
}

void Agent::sendHello() {
  std::vector<uint32_t> tids = threadIds();
  wire::Hello h;
  h.job = config_.job;
  h.node = config_.node;
  h.rank = uint32_t(rank_);
  h.world = uint32_t(config_.world > 0 ? config_.world : comm_nranks_.load());
  h.pid = uint32_t(getpid());
  h.tids = tids;
  std::array<uint8_t, wire::kMaxFrameSize> buf;
  size_t n = wire::encodeHello(buf, sender_id_, sequence_++, h);
  send(std::span<const uint8_t>(buf.data(), n));
}

std::string Agent::commLabel(uint32_t comm_index) const {
  if (comm_index == 0) return "pxn";
  return hex(profiler_.comm(comm_index).comm_id);
}

void Agent::flush() {
  if (rank_ < 0) rank_ = comm_rank_.load();  // no launcher variable: the first comm's rank
  profiler_.sweep(kQuietNs);
  if (rank_ < 0) return;  // tuner-only process without RANK: nothing to label samples with
  const uint64_t now_mono = uint64_t(monotonicNowNs());
  if (last_hello_ns_ == 0 || now_mono - last_hello_ns_ >= kHelloEveryNs) {
    sendHello();
    last_hello_ns_ = now_mono;
  }

  // ---- completions: per (comm, collective, algorithm, protocol), and allreduce totals
  std::map<CollKey, CollAgg> agg;
  std::vector<std::pair<CollKey, double>> timers;
  std::vector<wire::SampleRecord> plain;
  double ar_bytes = 0, ar_bus = 0, ar_ns = 0;
  Completion c;
  while (profiler_.popCompletion(c)) {
    CollKey k{c.comm, c.func, c.algo, c.proto};
    CollAgg& a = agg[k];
    ++a.count;
    a.bytes += c.bytes;
    a.channels = c.channels;
    const double bus = double(c.bytes) * busFactor(c.func, profiler_.comm(c.comm).nranks);
    if (c.duration_ns > 0) {
      a.timed_ns += c.duration_ns;
      a.timed_bus_bytes += uint64_t(bus);
      if (timers.size() < kMaxTimersPerFlush) timers.emplace_back(k, c.duration_ns * 1e-9);
    }
    if (c.func == kFuncAllReduce) {
      ar_bytes += double(c.bytes);
      if (c.duration_ns > 0) {
        ar_bus += bus;
        ar_ns += double(c.duration_ns);
        if (plain.size() < kMaxTimersPerFlush)
          plain.push_back({wire::MetricId::kAllreduceSeconds, wire::SampleType::kTimer, 0, 0,
                           c.duration_ns * 1e-9});
      }
    }
  }
  if (ar_bytes > 0)
    plain.push_back({wire::MetricId::kAllreduceBytes, wire::SampleType::kCounter, 0, 0, ar_bytes});
  if (ar_ns > 0)
    plain.push_back({wire::MetricId::kAllreduceBusbwBytesPerSecond, wire::SampleType::kGauge, 0, 0,
                     ar_bus / (ar_ns * 1e-9)});
  for (size_t i = 0; i < plain.size(); i += wire::kMaxSamplesPerFrame) {
    std::array<uint8_t, wire::kMaxFrameSize> buf;
    size_t count = std::min(plain.size() - i, wire::kMaxSamplesPerFrame);
    size_t n = wire::encodeSamples(buf, sender_id_, sequence_++, uint64_t(realtimeNowNs()),
                                   std::span<const wire::SampleRecord>(plain.data() + i, count));
    send(std::span<const uint8_t>(buf.data(), n));
  }

  LabelledSender out([this](std::span<const uint8_t> f) { send(f); },
                     [this] { return sequence_++; }, sender_id_);
  using L = wire::LabelledMetricId;
  for (const auto& [k, a] : agg) {
    std::string comm = commLabel(k.comm);
    std::initializer_list<std::string_view> labels = {comm, kFuncLabels[k.func],
                                                      kAlgoLabels[k.algo], kProtoLabels[k.proto]};
    out.add(L::kNcclCollectives, double(a.count), labels);
    out.add(L::kNcclCollectiveBytes, double(a.bytes), labels);
    out.add(L::kNcclCollectiveChannels, a.channels, labels);
    if (a.timed_ns > 0)
      out.add(L::kNcclBusbw, double(a.timed_bus_bytes) / (double(a.timed_ns) * 1e-9), labels);
  }
  for (const auto& [k, seconds] : timers) {
    std::string comm = commLabel(k.comm);
    out.add(L::kNcclCollectiveSeconds, seconds,
            {comm, kFuncLabels[k.func], kAlgoLabels[k.algo], kProtoLabels[k.proto]});
  }

  // ---- network steps per connection: the gauge while active, counters as deltas
  profiler_.forEachLink([&](const LinkCounters& l) {
    LinkCounters& seen = links_seen_[{l.comm, l.channel, l.peer, l.send}];
    const bool active = l.started != seen.started || l.stopped != seen.stopped;
    const bool outstanding = l.started > l.stopped;
    const bool was_outstanding = seen.started > seen.stopped;
    if (!active && !outstanding && !was_outstanding) return;
    std::string comm = commLabel(l.comm);
    std::string channel = std::to_string(l.channel), peer = std::to_string(l.peer);
    std::string_view dir = l.send ? "send" : "recv";
    out.add(L::kNcclOutstandingSteps, double(l.started - std::min(l.started, l.stopped)),
            {comm, channel, peer, dir});
    if (l.stopped > seen.stopped)
      out.add(L::kNcclSteps, double(l.stopped - seen.stopped), {comm, channel, peer, dir});
    if (l.bytes > seen.bytes)
      out.add(L::kNcclStepBytes, double(l.bytes - seen.bytes), {comm, channel, peer, dir});
    for (size_t p = 0; p < size_t(Phase::kCount); ++p)
      if (l.wait_ns[p] > seen.wait_ns[p])
        out.add(L::kNcclStepWaitSeconds, double(l.wait_ns[p] - seen.wait_ns[p]) * 1e-9,
                {comm, channel, peer, dir, kPhaseNames[p]});
    seen = l;
  });

  // ---- tuner: progress and the decision in force per communicator; refusals
  std::array<uint64_t, size_t(Refusal::kCount)> refusals{};
  for (size_t r = 0; r < refusals.size(); ++r) refusals[r] = verifier_->refused(Refusal(r));
  tuner_.forEach([&](const TunerContext& t) {
    std::string comm = t.comm_id != 0 ? hex(t.comm_id) : "any";
    out.add(L::kNcclTunerCalls, double(t.calls.load(std::memory_order_relaxed)), {comm});
    out.add(L::kNcclDecisionEpoch, double(t.epoch.load(std::memory_order_relaxed)), {comm});
  });
  refusals[size_t(Refusal::kLate)] = tuner_.lateTotal();
  refusals[size_t(Refusal::kUnsupported)] = tuner_.unsupportedTotal();
  for (size_t r = 0; r < refusals.size(); ++r) {
    if (refusals[r] > refusals_seen_[r])
      out.add(L::kNcclDecisionsRefused, double(refusals[r] - refusals_seen_[r]),
              {kRefusalNames[r]});
    refusals_seen_[r] = refusals[r];
  }
  for (size_t d = 0; d < size_t(Drop::kCount); ++d) {
    uint64_t v = profiler_.dropped(Drop(d));
    if (v > drops_seen_[d])
      out.add(L::kNcclEventsDropped, double(v - drops_seen_[d]), {kDropNames[d]});
    drops_seen_[d] = v;
  }
  out.finish();
}

}  // namespace bpftrain::nccl_plugin
