#include "trainer/app/rank_runner.h"

#include <gloo/rendezvous/store.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "common/hmac.h"
#include "common/wire_format.h"
#include "trainer/collective/communicator.h"
#include "trainer/collective/rendezvous.h"
#include "trainer/control/control_receiver.h"
#include "trainer/control/verifier.h"
#include "trainer/model/checkpoint.h"
#include "trainer/model/dataset.h"
#include "trainer/model/huge_buffer.h"
#include "trainer/model/mlp.h"
#include "trainer/pinning/pinner.h"
#include "trainer/telemetry/emitter.h"

#ifdef BPFTRAIN_WITH_NCCL_BACKEND
#include "trainer/app/nccl_communicator.h"
#endif

namespace bpftrain::trainer::app {
namespace {

// Which ranks share a host, from hostnames exchanged through the rendezvous store: node index per
// rank (in order of first appearance). Used when no launcher or --node-of said so.
std::vector<int> nodesFromHostnames(const Options& o, const std::string& prefix) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  auto store = collective::openStore(o.store);
  const std::string base = prefix + "/hosts";
  collective::joinStore(*store, o.store, base, o.rank, o.world, std::chrono::seconds(o.timeout_s));
  std::string mine(host);
  store->set(base + "/name/" + std::to_string(o.rank), std::vector<char>(mine.begin(), mine.end()));
  std::vector<std::string> names;
  std::vector<int> node_of;
  for (int r = 0; r < o.world; ++r) {
    const std::string key = base + "/name/" + std::to_string(r);
    store->wait({key}, std::chrono::seconds(o.timeout_s));
    std::vector<char> v = store->get(key);
    std::string name(v.begin(), v.end());
    auto it = std::find(names.begin(), names.end(), name);
    node_of.push_back(int(it - names.begin()));
    if (it == names.end()) names.push_back(name);
  }
  return node_of;
}

using Clock = std::chrono::steady_clock;
using wire::MetricId;

uint64_t realtimeNs() {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return uint64_t(ts.tv_sec) * 1'000'000'000ull + uint64_t(ts.tv_nsec);
}

uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The config word rank 0 broadcasts at a step boundary (little-endian): epoch, topology, pinning,
// and the step of the next broadcast, so every rank agrees on when to sync without a clock.
constexpr size_t kWordBytes = 24;
// Sync at most this often: a broadcast costs a round trip, so on millisecond steps syncing every
// step would double the step time; a decision still lands within one step + this interval.
constexpr double kSyncIntervalSeconds = 0.025;
// Above this allreduce time, decisions travel by broadcast at the boundary instead of in the tail.
constexpr double kBroadcastAboveAllreduceSeconds = 0.040;
constexpr size_t kTailFloats = 8;
void packWord(const control::ConfigWord& w, uint8_t* p) {
  std::memset(p, 0, kWordBytes);
  wire::putU64(p, w.epoch);
  p[8] = uint8_t(w.topology);
  p[9] = uint8_t(w.pinning);
}
control::ConfigWord unpackWord(const uint8_t* p) {
  return {wire::getU64(p), Topology(p[8] % kTopologyCount), PinMode(p[9] % kPinModeCount)};
}

class RankRunner {
 public:
  explicit RankRunner(const Options& o) : o_(o) {}
  int run();

 private:
  void setUpThreads();
  void applyPinning(PinMode mode);
  void refreshThreads();
  void maybeResume();
  void syncConfig(uint64_t step);
  void collectDecisions(uint64_t step);
  control::ConfigWord outgoingWord() const;
  void applyConfig(const control::ConfigWord& next, uint64_t step);
  void writeTail(uint64_t step, bool collect);
  void readTail();
  uint64_t collected_step_ = ~uint64_t{0};
  // --duration: rank 0 compares its clock with the deadline and raises the stop flag in the tail;
  // every rank reads the same summed tail, so all stop after the same step.
  Clock::time_point deadline_ = Clock::time_point::max();
  bool stop_ = false;
  std::optional<control::ConfigWord> staged_;  // from the last allreduce, applied at the next step
  bool broadcast_mode_ = false;
  double allreduce_seconds_ewma_ = 0;
  uint64_t next_sync_step_ = 0;
  int local_rank_ = 0, local_world_ = 1;
  std::vector<int> node_of_;
  double step_seconds_ewma_ = 0;  // rank 0's estimate, to space syncs
  void checkpoint(uint64_t step_done);
  void log(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  const Options& o_;
  std::unique_ptr<model::Mlp> model_;
  std::unique_ptr<collective::Communicator> comm_;
  std::unique_ptr<pinning::Pinner> pinner_;
  std::unique_ptr<telemetry::Emitter> emitter_;
  std::unique_ptr<control::Verifier> verifier_;
  std::unique_ptr<control::ControlReceiver> receiver_;
  control::ConfigWord config_;
  std::optional<control::ConfigWord> pending_;  // rank 0: accepted, not yet broadcast
  uint64_t pending_arrival_ns_ = 0;
  uint64_t start_step_ = 0;
  std::set<pid_t> compute_tids_;
  std::vector<pid_t> known_tids_;
};

void RankRunner::log(const char* fmt, ...) {
  if (o_.quiet) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof(line), fmt, ap);
  va_end(ap);
  std::fprintf(stdout, "bpftrain-train: rank %d: %s\n", o_.rank, line);
  std::fflush(stdout);
}

void RankRunner::applyPinning(PinMode mode) {
  std::vector<pid_t> compute, comm;
  for (pid_t t : pinning::listThreads()) (compute_tids_.count(t) ? compute : comm).push_back(t);
  pinning::MemoryRegion regions[] = {
      {model_->parameterBuffer().region(), model_->parameterBuffer().regionBytes()},
      {model_->gradientBuffer().region(), model_->gradientBuffer().regionBytes()},
      {model_->momentumBuffer().region(), model_->momentumBuffer().regionBytes()}};
  std::string error;
  if (!pinner_->apply(mode, compute, comm, regions, error))
    log("pinning %s degraded: %s", std::string(pinModeName(mode)).c_str(), error.c_str());
}

// Threads come and go (Gloo's device loop, BLAS workers): re-pin new ones and announce them.
void RankRunner::refreshThreads() {
  std::vector<pid_t> now = pinning::listThreads();
  if (now == known_tids_) return;
  known_tids_ = now;
  applyPinning(config_.pinning);
  std::string compute, comm;
  for (pid_t t : now) {
    std::string& list = compute_tids_.count(t) ? compute : comm;
    list += (list.empty() ? "" : ",") + std::to_string(t);
  }
  log("threads compute %s communication %s", compute.c_str(), comm.c_str());
  if (emitter_) emitter_->setThreads(now);
}

void RankRunner::maybeResume() {
  if (!o_.resume) return;
  // Rank 0 picks the newest valid checkpoint and tells everyone, so all ranks load the same one.
  uint8_t word[8] = {};
  uint64_t step = ~uint64_t{0};
  model::CheckpointState state;
  if (o_.rank == 0) {
    if (auto s = model::loadNewestCheckpoint(o_.checkpoint_dir, model_->parameters(),
                                             model_->momentum())) {
      state = *s;
      step = s->step;
    }
  }
  wire::putU64(word, step);
  comm_->broadcast(word, 0);
  step = wire::getU64(word);
  if (step == ~uint64_t{0}) {
    log("no valid checkpoint in %s: starting from step 0", o_.checkpoint_dir.c_str());
    return;
  }
  std::string error;
  if (o_.rank != 0 && !model::loadCheckpoint(o_.checkpoint_dir, step, state, model_->parameters(),
                                             model_->momentum(), error))
    throw std::runtime_error(
        "cannot load checkpoint " + model::checkpointPath(o_.checkpoint_dir, step) +
        " chosen by rank 0: " + error + " (is --checkpoint on a filesystem every rank sees?)");
  if (state.model != o_.model.name)
    throw std::runtime_error("checkpoint " + model::checkpointPath(o_.checkpoint_dir, step) +
                             " is for --model " + state.model + ", not " + o_.model.name);
  start_step_ = state.step;
  if (state.config_epoch > 0)
    config_ = {state.config_epoch, Topology(state.topology % kTopologyCount),
               PinMode(state.pinning % kPinModeCount)};
  log("resumed from %s at step %" PRIu64 " (epoch %" PRIu64 ")",
      model::checkpointPath(o_.checkpoint_dir, step).c_str(), start_step_, config_.epoch);
}

// At a step boundary: rank 0 broadcasts the config word; every rank applies a newer one now.
// Rank 0: picks up verified controller decisions (and the test hook's draws) as pending.
void RankRunner::collectDecisions(uint64_t step) {
  if (o_.rank != 0 || collected_step_ == step) return;
  collected_step_ = step;
  control::ConfigWord decision;
  uint64_t arrival = 0;
  const uint64_t rejected_before = verifier_ ? verifier_->rejectedTotal() : 0;
  const bool got = receiver_ && receiver_->poll(decision, arrival);
  if (emitter_ && verifier_ && verifier_->rejectedTotal() != rejected_before)
    emitter_->addCounter(MetricId::kControlRejected,
                         double(verifier_->rejectedTotal() - rejected_before));
  if (got) {
    pending_ = decision;
    pending_arrival_ns_ = arrival;
    log("decision epoch %" PRIu64 " arrived at %" PRIu64 " ns", decision.epoch, arrival);
  }
  if (o_.switch_every > 0 && step > start_step_ && step % uint64_t(o_.switch_every) == 0) {
    uint64_t r = mix(o_.switch_seed ^ mix(step));
    uint64_t base = std::max(config_.epoch, pending_ ? pending_->epoch : 0);
    pending_ = control::ConfigWord{base + 1, Topology(r % kTopologyCount),
                                   PinMode((r >> 8) % kPinModeCount)};
    pending_arrival_ns_ = realtimeNs();
  }
}

control::ConfigWord RankRunner::outgoingWord() const {
  return pending_ && pending_->epoch > config_.epoch ? *pending_ : config_;
}

// Every rank runs this at the same step with the same word.
void RankRunner::applyConfig(const control::ConfigWord& next, uint64_t step) {
  if (next.epoch <= config_.epoch) return;
  const bool repin = next.pinning != config_.pinning;
  config_ = next;
  if (repin) applyPinning(config_.pinning);
  uint64_t applied = realtimeNs();
  if (emitter_) {
    emitter_->setGauge(MetricId::kConfigEpoch, double(config_.epoch));
    emitter_->setGauge(MetricId::kTopology, double(uint8_t(config_.topology)));
    emitter_->setGauge(MetricId::kPinning, double(uint8_t(config_.pinning)));
  }
  log("applied epoch %" PRIu64 " at step %" PRIu64 ": topology %s pinning %s at %" PRIu64 " ns%s",
      config_.epoch, step, std::string(topologyName(config_.topology)).c_str(),
      std::string(pinModeName(config_.pinning)).c_str(), applied,
      o_.rank == 0 && pending_arrival_ns_
          ? (" (arrived " + std::to_string(pending_arrival_ns_) + " ns)").c_str()
          : "");
  if (pending_ && pending_->epoch <= config_.epoch) {
    pending_.reset();
    pending_arrival_ns_ = 0;
  }
}

// Broadcast path (long allreduces): rank 0 broadcasts the word at a step boundary and every rank
// applies it before this step's allreduce.
void RankRunner::syncConfig(uint64_t step) {
  collectDecisions(step);
  uint8_t word[kWordBytes];
  packWord(outgoingWord(), word);
  uint64_t every = 1;
  if (step_seconds_ewma_ > 0 && o_.switch_every == 0)  // the test hook syncs every step
    every = std::clamp<uint64_t>(uint64_t(kSyncIntervalSeconds / step_seconds_ewma_), 1, 1000);
  wire::putU64(word + 16, step + every);
  comm_->broadcast(std::span<uint8_t>(word, kWordBytes), 0);
  next_sync_step_ = wire::getU64(word + 16);
  applyConfig(unpackWord(word), step);
}

// Piggyback path: the word rides in the tail of the gradient buffer. Only rank 0 writes non-zero
// values, so the allreduce's sum is rank 0's word exactly, on every rank, at no extra round trip.
void RankRunner::writeTail(uint64_t step, bool collect) {
  std::span<float> tail = model_->gradientTail();
  std::fill(tail.begin(), tail.end(), 0.0f);
  if (o_.rank != 0) return;
  if (collect) collectDecisions(step);
  control::ConfigWord w = outgoingWord();
  tail[0] = 1;
  tail[1] = float(w.epoch & 0xFFFF);
  tail[2] = float((w.epoch >> 16) & 0xFFFF);
  tail[3] = float((w.epoch >> 32) & 0xFFFF);
  tail[4] = float(uint8_t(w.topology));
  tail[5] = float(uint8_t(w.pinning));
  // Long allreduces make the piggyback slow to deliver (a decision that just missed one waits for
  // the next): switch to a broadcast at each boundary, where its cost is small against the step.
  // Without --adaptive (a --duration-only run) there are no decisions to deliver.
  tail[6] = o_.sync == "broadcast" || (o_.sync == "auto" && o_.switch_every == 0 && o_.adaptive &&
                                       allreduce_seconds_ewma_ > kBroadcastAboveAllreduceSeconds);
  tail[7] = Clock::now() >= deadline_;
}

void RankRunner::readTail() {
  std::span<const float> tail = model_->gradientTail();
  if (tail[0] != 1) return;  // the world did not carry rank 0's word (cannot happen with a sum)
  control::ConfigWord w{uint64_t(tail[1]) | uint64_t(tail[2]) << 16 | uint64_t(tail[3]) << 32,
                        Topology(uint8_t(tail[4]) % kTopologyCount),
                        PinMode(uint8_t(tail[5]) % kPinModeCount)};
  if (w.epoch > config_.epoch) staged_ = w;
  broadcast_mode_ = tail[6] != 0;
  stop_ = tail[7] != 0;
}

void RankRunner::checkpoint(uint64_t step_done) {
  if (emitter_) emitter_->setGauge(MetricId::kCheckpointActive, 1);
  if (o_.rank == 0) {
    model::CheckpointState st;
    st.step = step_done;
    st.config_epoch = config_.epoch;
    st.topology = uint8_t(config_.topology);
    st.pinning = uint8_t(config_.pinning);
    st.seed = o_.seed;
    st.model = o_.model.name;
    model::writeCheckpoint(o_.checkpoint_dir, st, model_->parameters(), model_->momentum());
  }
  if (emitter_) emitter_->setGauge(MetricId::kCheckpointActive, 0);
}

int RankRunner::run() {
  model::useSingleThreadedBlas();
  const std::string data_path = o_.data.empty() ? model::defaultDigitsPath() : o_.data;
  model::Split split = model::splitDataset(model::loadDigits(data_path), 0.2, o_.seed);
  model::Sharder sharder(split.train.rows(), o_.rank, o_.world, o_.batch, o_.seed);
  model_ =
      std::make_unique<model::Mlp>(o_.model, std::max(o_.batch, 128), o_.hugepages, kTailFloats);
  model_->initialize(o_.seed);
  config_ = {0, o_.topology, o_.pin};

  for (pid_t t : pinning::listThreads()) compute_tids_.insert(t);  // main + BLAS workers
  collective::CommOptions co;
  co.rank = o_.rank;
  co.world = o_.world;
  co.store = o_.store;
  co.prefix = "bpftrain-" + o_.job;
  co.bind_address = o_.bind;
  co.node_of = o_.node_of;
  local_rank_ = o_.local_rank;
  local_world_ = o_.local_world;
  if (co.node_of.empty() && o_.world > 1) {
    co.node_of = nodesFromHostnames(o_, co.prefix);
    if (o_.local_defaulted) {  // pinning is planned among the ranks on this host
      local_rank_ = local_world_ = 0;
      for (int r = 0; r < o_.world; ++r) {
        if (co.node_of[size_t(r)] != co.node_of[size_t(o_.rank)]) continue;
        local_rank_ += r < o_.rank;
        ++local_world_;
      }
    }
  }
  node_of_ = co.node_of;
  co.timeout = std::chrono::seconds(o_.timeout_s);
  co.max_elements = model_->gradientsWithTail().size();
  if (o_.backend == "nccl") {
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
    comm_ = createNcclCommunicator(co);
#else
    throw std::runtime_error(
        "--backend nccl: this build has no NCCL backend (configure with CUDA and NCCL installed, "
        "BPFTRAIN_WITH_NCCL=ON), use --backend gloo");
#endif
  } else {
    comm_ = collective::Communicator::create(co);
  }
  pinner_ = std::make_unique<pinning::Pinner>(local_rank_, local_world_);

  if (o_.collector != "none") {
    telemetry::EmitterOptions eo;
    eo.collector = o_.collector;
    eo.hz = o_.metrics_hz;
    eo.job = o_.job;
    eo.rank = uint32_t(o_.rank);
    eo.world = uint32_t(o_.world);
    if (!o_.node_of.empty()) eo.node = "node" + std::to_string(o_.node_of[size_t(o_.rank)]);
    emitter_ = std::make_unique<telemetry::Emitter>(eo);
  }
  maybeResume();
  if (o_.adaptive && o_.rank == 0) {
    std::string error;
    auto secret = readSecretFile(o_.secret_file, error);
    if (!secret) throw std::runtime_error("--secret " + o_.secret_file + ": " + error);
    verifier_ = std::make_unique<control::Verifier>(o_.job, *secret, config_.epoch);
    receiver_ = std::make_unique<control::ControlReceiver>(o_.control, *verifier_);
    log("control listening on %s (port %u)", o_.control.c_str(), unsigned(receiver_->port()));
  }
  if (emitter_) {
    emitter_->start();
    emitter_->setGauge(MetricId::kConfigEpoch, double(config_.epoch));
    emitter_->setGauge(MetricId::kTopology, double(uint8_t(config_.topology)));
    emitter_->setGauge(MetricId::kPinning, double(uint8_t(config_.pinning)));
    emitter_->setGauge(MetricId::kCheckpointActive, 0);
  }
  refreshThreads();
  applyPinning(config_.pinning);
  log("world %d (%s), local rank %d/%d, model %s (%zu parameters, %.1f MiB), topology %s, pin %s, "
      "steps %" PRIu64 "..%" PRIu64,
      o_.world, o_.rank_source.c_str(), local_rank_, local_world_, o_.model.name.c_str(),
      model_->parameterCount(), double(model_->parameterCount()) * 4 / (1 << 20),
      std::string(topologyName(config_.topology)).c_str(),
      std::string(pinModeName(config_.pinning)).c_str(), start_step_, o_.steps);

  const bool sync = o_.adaptive || o_.switch_every > 0 || o_.duration_s > 0;
  broadcast_mode_ = o_.sync == "broadcast";
  const float grad_scale = 1.0f / float(o_.world);
  const double bytes = double(model_->parameterCount()) * sizeof(float);
  auto last_slow_probe = Clock::now() - std::chrono::seconds(10);
  double loss = 0;
  double sum_step_s = 0, sum_compute_s = 0, sum_allreduce_s = 0;
  // --overhead-ab: per-step times of the on and off blocks.
  std::vector<double> ab_on, ab_off;
  if (o_.overhead_ab > 0) {
    ab_on.reserve(o_.steps);
    ab_off.reserve(o_.steps);
  }
  uint64_t end_step = o_.steps;
  const auto train_start = Clock::now();
  if (o_.duration_s > 0 && o_.rank == 0)
    deadline_ = train_start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(o_.duration_s));
  for (uint64_t step = start_step_; step < o_.steps; ++step) {
    const bool features_on =
        o_.overhead_ab == 0 || ((step - start_step_) / uint64_t(o_.overhead_ab)) % 2 == 1;
    auto t0 = Clock::now();
    if (staged_) {  // carried by the previous step's allreduce: every rank applies it now
      applyConfig(*staged_, step);
      staged_.reset();
    }
    if (sync && broadcast_mode_ && features_on && step >= next_sync_step_) syncConfig(step);
    loss = model_->computeGradients(split.train, sharder.batchFor(step));
    if (sync) writeTail(step, features_on);
    auto t1 = Clock::now();
    comm_->allreduce(model_->gradientsWithTail(), config_.topology);
    auto t2 = Clock::now();
    if (sync) readTail();
    model_->applyGradients(o_.lr, o_.momentum, grad_scale);
    sum_compute_s += std::chrono::duration<double>(t1 - t0).count();
    sum_allreduce_s += std::chrono::duration<double>(t2 - t1).count();
    const double this_step_s = std::chrono::duration<double>(Clock::now() - t0).count();
    sum_step_s += this_step_s;
    step_seconds_ewma_ =
        step_seconds_ewma_ == 0 ? this_step_s : 0.9 * step_seconds_ewma_ + 0.1 * this_step_s;
    const double ar_s = std::chrono::duration<double>(t2 - t1).count();
    allreduce_seconds_ewma_ =
        allreduce_seconds_ewma_ == 0 ? ar_s : 0.9 * allreduce_seconds_ewma_ + 0.1 * ar_s;
    if (emitter_ && features_on) {
      const double step_s = std::chrono::duration<double>(Clock::now() - t0).count();
      const double ar_s = std::chrono::duration<double>(t2 - t1).count();
      emitter_->pushStep(
          {realtimeNs(), step_s, ar_s, bytes, collective::busBandwidth(bytes, ar_s, o_.world)});
      emitter_->setGauge(MetricId::kLoss, loss);
      emitter_->setGauge(MetricId::kSamplesPerSecond, step_s > 0 ? o_.batch / step_s : 0);
      emitter_->setGauge(MetricId::kStep, double(step + 1));
    }
    // Once a second: threads may have appeared, and AnonHugePages moves slowly.
    if (Clock::now() - last_slow_probe > std::chrono::seconds(1) || step == start_step_) {
      last_slow_probe = Clock::now();
      refreshThreads();
      if (emitter_) {
        int64_t ahp = model::anonHugePagesBytes();
        if (ahp >= 0) emitter_->setGauge(MetricId::kAnonHugePagesBytes, double(ahp));
      }
    }
    if (o_.eval_every > 0 && o_.rank == 0 && (step + 1) % uint64_t(o_.eval_every) == 0) {
      double acc = model_->accuracy(split.test);
      if (emitter_) emitter_->setGauge(MetricId::kAccuracy, acc);
      log("step %" PRIu64 " loss %.4f test accuracy %.4f", step + 1, loss, acc);
    }
    if (o_.checkpoint_every > 0 && (step + 1) % uint64_t(o_.checkpoint_every) == 0)
      checkpoint(step + 1);
    if (o_.overhead_ab > 0) {
      double s = std::chrono::duration<double>(Clock::now() - t0).count();
      (features_on ? ab_on : ab_off).push_back(s);
    }
    if (stop_) {
      end_step = step + 1;
      log("--duration %.1f s reached: stopped after step %" PRIu64 " (%.1f s of training)",
          double(o_.duration_s), end_step,
          std::chrono::duration<double>(Clock::now() - train_start).count());
      break;
    }
  }
  const double accuracy = model_->accuracy(split.test);
  if (emitter_) {
    emitter_->setGauge(MetricId::kAccuracy, accuracy);
    emitter_->stop();  // flushes what is pending
  }
  std::printf("bpftrain-train: rank %d: final step %" PRIu64
              " loss %.4f test_accuracy %.4f "
              "epoch %" PRIu64 " topology %s pinning %s params_hash 0x%016" PRIx64 "\n",
              o_.rank, end_step, loss, accuracy, config_.epoch,
              std::string(topologyName(config_.topology)).c_str(),
              std::string(pinModeName(config_.pinning)).c_str(),
              model::hashFloats(model_->parameters()));
  const double n_steps = double(std::max<uint64_t>(1, end_step - std::min(end_step, start_step_)));
  std::printf(
      "bpftrain-train: rank %d: mean step %.6f s (compute %.6f s, allreduce %.6f s, "
      "busbw %.3g B/s) anon_hugepages %" PRId64 " bytes\n",
      o_.rank, sum_step_s / n_steps, sum_compute_s / n_steps, sum_allreduce_s / n_steps,
      collective::busBandwidth(bytes, sum_allreduce_s / n_steps, o_.world),
      model::anonHugePagesBytes());
  if (verifier_) {
    std::printf("bpftrain-train: rank 0: control accepted %" PRIu64 " resent %" PRIu64
                " rejected %" PRIu64,
                verifier_->accepted(), verifier_->duplicates(), verifier_->rejectedTotal());
    for (int r = 1; r < int(control::Reject::kCount); ++r)
      if (uint64_t n = verifier_->rejected(control::Reject(r)))
        std::printf(" %s=%" PRIu64, std::string(control::rejectName(control::Reject(r))).c_str(),
                    n);
    std::printf("\n");
  }
  if (emitter_)
    std::printf("bpftrain-train: rank %d: telemetry frames %" PRIu64 " dropped samples %" PRIu64
                "\n",
                o_.rank, emitter_->framesSent(), emitter_->dropped());
  if (o_.overhead_ab > 0) {
    auto median = [](std::vector<double>& v) {
      if (v.empty()) return 0.0;
      std::nth_element(v.begin(), v.begin() + long(v.size() / 2), v.end());
      return v[v.size() / 2];
    };
    double on = median(ab_on), off = median(ab_off);
    std::printf(
        "bpftrain-train: rank %d: overhead_ab median step off %.6f s on %.6f s "
        "overhead %+.2f%% (%zu/%zu steps)\n",
        o_.rank, off, on, off > 0 ? (on / off - 1) * 100 : 0.0, ab_off.size(), ab_on.size());
  }
  std::fflush(stdout);
  // Keep every rank alive until all are done, so no one sees a peer vanish mid-collective.
  comm_->barrier();
  return 0;
}

}  // namespace

int runRank(const Options& options) {
  try {
    RankRunner runner(options);
    return runner.run();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bpftrain-train: rank %d: error: %s\n", options.rank, e.what());
    return 1;
  }
}

}  // namespace bpftrain::trainer::app
