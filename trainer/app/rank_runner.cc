#include "trainer/app/rank_runner.h"

#include <gloo/rendezvous/store.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <stdexcept>
#include <vector>

#include "common/clock.h"
#include "common/wire_format.h"
#include "trainer/app/nccl_environment.h"
#include "trainer/app/rank_runner_impl.h"
#include "trainer/collective/communicator.h"
#include "trainer/collective/gradient_buckets.h"
#include "trainer/collective/rendezvous.h"
#include "trainer/control/config_sync.h"
#include "trainer/control/ring_probe.h"
#include "trainer/launcher/launcher.h"
#include "trainer/model/checkpoint.h"
#include "trainer/model/dataset.h"
#include "trainer/model/huge_buffer.h"
#include "trainer/model/mlp.h"
#include "trainer/pinning/pinner.h"
#include "trainer/telemetry/emitter.h"

#ifdef BPFTRAIN_WITH_NCCL_BACKEND
#include "trainer/app/nccl_communicator.h"
#include "trainer/gpu/gpu_mlp.h"
#endif

namespace bpftrain::trainer::app {

// Bit t set: Topology t runs over `transport` (every one today; see topologyUnsupported).
uint32_t runnableTopologies(const std::string& transport) {
  uint32_t topologies = 0;
  for (size_t t = 0; t < kTopologyCount; ++t)
    if (collective::topologyUnsupported(Topology(t), transport).empty()) topologies |= 1u << t;
  return topologies;
}

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

}  // namespace

using wire::MetricId;

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
  else if (pinner_->lastMigrateError() != 0)
    log("pinning %s: some of the process's other memory keeps its placement (mbind: %s); the "
        "model's buffers are placed",
        std::string(pinModeName(mode)).c_str(), std::strerror(pinner_->lastMigrateError()));
}

// Threads come and go (Gloo's device loop, BLAS workers): re-pin new ones and announce them.
void RankRunner::refreshThreads() {
  std::vector<pid_t> now = pinning::listThreads();
  if (now == known_tids_) return;
  known_tids_ = now;
  applyPinning(config().pinning);
  std::string compute, comm;
  for (pid_t t : now) {
    std::string& list = compute_tids_.count(t) ? compute : comm;
    if (!list.empty()) list += ',';
    list += std::to_string(t);
  }
  log("threads compute %s communication %s", compute.c_str(), comm.c_str());
  if (emitter_) emitter_->setThreads(now);
}

void RankRunner::setUpModel() {
  model::useSingleThreadedBlas();
  const std::string data_path = o_.data.empty() ? model::defaultDigitsPath() : o_.data;
  split_ = model::splitDataset(model::loadDigits(data_path), 0.2, o_.seed);
  sharder_.emplace(split_->train.rows(), o_.rank, o_.world, o_.batch, o_.seed);
  model_ = std::make_unique<model::Mlp>(o_.model, std::max(o_.batch, 128), o_.hugepages,
                                        control::kSyncWordFloats);
  model_->initialize(o_.seed);
  // NCCL allreduces the device buffer in one call: its algorithm is NCCL's, not switched here.
  buckets_.emplace(model_->parameterCount(), control::kSyncWordFloats,
                   o_.backend == "nccl" ? 1 : o_.allreduce_buckets);
  resumed_config_ = {0, o_.topology, o_.pin};
  for (pid_t t : pinning::listThreads()) compute_tids_.insert(t);  // main + BLAS workers
}

void RankRunner::connect() {
  collective::CommOptions co;
  co.rank = o_.rank;
  co.world = o_.world;
  co.store = o_.store;
  co.prefix = "bpftrain-" + o_.job;
  co.bind_address = o_.bind;
  co.transport = o_.transport;
  if (!o_.rdma_devices.empty())
    co.rdma_device = o_.rdma_devices[o_.rdma_devices.size() == 1 ? 0 : size_t(o_.rank)];
  co.gid_index = o_.gid_index;
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
  co.timeout = std::chrono::seconds(o_.timeout_s);
  co.max_elements = model_->gradientsWithTail().size();
  if (o_.backend == "nccl") {
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
    setUpNccl(co);
#else
    throw std::runtime_error(
        "--backend nccl: this build has no NCCL backend (configure with CUDA and NCCL installed, "
        "BPFTRAIN_WITH_NCCL=ON), use --backend gloo");
#endif
  } else {
    comm_ = collective::Communicator::create(co);
    // Allocated here, off the step path; the ring probe's zeros stay zeros. No larger than the
    // gradients, the largest allreduce the communicator sized its buffers for.
    if (o_.adaptive) ring_probe_.assign(std::min(control::kRingProbeFloats, co.max_elements), 0.0f);
  }
  pinner_ = std::make_unique<pinning::Pinner>(local_rank_, local_world_);
}

// NCCL's environment first (NCCL and its plugins read it when the communicator starts), then the
// communicator, then the model on its GPU.
void RankRunner::setUpNccl(const collective::CommOptions& co) {
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
  const NcclEnvironment env = ncclEnvironment(o_, environmentMap(), findNcclPlugin());
  if (!env.error.empty()) throw std::runtime_error(env.error);
  std::string said;
  for (const EnvAssignment& a : env.set) {
    setenv(a.name.c_str(), a.value.c_str(), 1);
    said += " " + a.name + "=" + a.value;
  }
  for (const std::string& k : env.kept) said += " " + k + " (yours)";
  if (!said.empty()) log("nccl environment:%s", said.c_str());
  // The GPU model allreduces its device buffer in place; only sync words, the resume step and
  // barriers go through the communicator's staging buffer, so it need not hold the gradients
  // (it did: one model's worth of device memory for nothing).
  collective::CommOptions staged = co;
  staged.max_elements = 0;  // the communicator's minimum (4 KiB)
  auto comm = createNcclCommunicator(staged);
  nccl_ = comm.get();
  comm_ = std::move(comm);
  gpu_ =
      std::make_unique<gpu::GpuMlp>(o_.model, split_->train, split_->test, std::max(o_.batch, 128),
                                    control::kSyncWordFloats, nccl_->stream());
  if (gpu_->parameterCount() != model_->parameterCount())
    throw std::runtime_error("GPU model layout differs from the CPU model's");
  log("GPU model: kernels compiled for %s, cuBLAS %s", gpu_->arch().c_str(),
      gpu::gpuLibrary().cublas_path.c_str());
#else
  (void)co;
#endif
}

float RankRunner::computeGradients(uint64_t step) {
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
  if (gpu_) return gpu_->computeGradients(sharder_->batchFor(step));
#endif
  return model_->computeGradients(split_->train, sharder_->batchFor(step));
}

// Bucket by bucket, each with the sync word in its tail: a new topology read after one bucket
// runs the remaining buckets of this step on every rank (ConfigSync::readTail says which words may
// apply mid-step). On the GPU the allreduce sums the device buffer in place, in one call; only the
// control-word tail travels to and from the host, where ConfigSync writes and reads it.
void RankRunner::allreduceGradients(uint64_t step, bool features_on) {
  auto write = [&](std::span<float> tail) {
    sync_->writeTail(step, features_on, Clock::now(), tail);
  };
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
  if (gpu_) {
    write(model_->gradientTail());
    gpu_->uploadTail(model_->gradientTail());
    nccl_->allreduceDevice(gpu_->gradientsWithTail(), gpu_->gradientsWithTailCount());
    gpu_->downloadTail(model_->gradientTail());
    sync_->readTail(model_->gradientTail());
    return;
  }
#endif
  const size_t n = buckets_->size();
  for (size_t b = 0; b < n; ++b) {
    buckets_->run(
        model_->gradientsWithTail(), b, write,
        [&](std::span<float> data) { comm_->allreduce(data, config().topology); },
        [&](std::span<const float> tail) {
          if (auto s = sync_->readTail(tail, b + 1 < n)) applySwitch(*s, step, b + 1);
        });
    // Slow buckets (ConfigSync::bucketSyncDue): rank 0's word by broadcast before the next one, so
    // a decision that arrived during this bucket runs the next bucket, not the one after.
    if (b + 1 < n && sync_->bucketSyncDue()) {
      uint8_t word[control::kSyncWordBytes];
      broadcastWord(step, word);
      if (auto s = sync_->readBucketSync(word)) applySwitch(*s, step, b + 1);
    }
  }
}

void RankRunner::applyGradients(float grad_scale) {
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
  if (gpu_) return gpu_->applyGradients(o_.lr, o_.momentum, grad_scale);
#endif
  model_->applyGradients(o_.lr, o_.momentum, grad_scale);
}

double RankRunner::testAccuracy() {
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
  if (gpu_) return gpu_->accuracy();
#endif
  return model_->accuracy(split_->test);
}

void RankRunner::copyModelToHost() {
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
  if (gpu_) gpu_->download(model_->parameters(), model_->momentum());
#endif
}

void RankRunner::copyModelToDevice() {
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
  if (gpu_) gpu_->upload(model_->parameters(), model_->momentum());
#endif
}

// NCCL runs its own algorithms: the Gloo topology in the config word means nothing there.
std::string RankRunner::topologyLabel(Topology t) const {
  if (o_.backend == "nccl") return "nccl:" + (o_.nccl_algo.empty() ? "auto" : o_.nccl_algo);
  return std::string(topologyName(t));
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
    resumed_config_ = {state.config_epoch, Topology(state.topology % kTopologyCount),
                       PinMode(state.pinning % kPinModeCount)};
  log("resumed from %s at step %" PRIu64 " (epoch %" PRIu64 ")",
      model::checkpointPath(o_.checkpoint_dir, step).c_str(), start_step_, resumed_config_.epoch);
}

void RankRunner::startTelemetry() {
  if (o_.collector == "none") return;
  telemetry::EmitterOptions eo;
  eo.collector = o_.collector;
  eo.hz = o_.metrics_hz;
  eo.job = o_.job;
  eo.rank = uint32_t(o_.rank);
  eo.world = uint32_t(o_.world);
  if (!o_.node_of.empty()) eo.node = "node" + std::to_string(o_.node_of[size_t(o_.rank)]);
  // (connect() has set NCCL's environment by now.)
  eo.report_allreduce = !(o_.backend == "nccl" && bpftrainProfilerReports(environmentMap()));
  if (!eo.report_allreduce)
    log("allreduce metrics come from the NCCL profiler plugin (per collective); this rank "
        "reports its step times only");
  emitter_ = std::make_unique<telemetry::Emitter>(eo);
}

void RankRunner::afterStep(uint64_t step, bool features_on, double step_s, double allreduce_s,
                           double ring_probe_s) {
  if (emitter_ && features_on) {
    const double bytes = double(model_->parameterCount()) * sizeof(float);
    emitter_->pushStep({realtimeNowNs(), step_s, allreduce_s, bytes,
                        collective::busBandwidth(bytes, allreduce_s, o_.world), ring_probe_s});
    emitter_->setGauge(MetricId::kLoss, loss_);
    emitter_->setGauge(MetricId::kSamplesPerSecond, step_s > 0 ? o_.batch / step_s : 0);
    emitter_->stepEnded();
    emitter_->setGauge(MetricId::kStep, double(step + 1));
  }
  // Once a second: threads may have appeared, and AnonHugePages moves slowly.
  if (Clock::now() - last_slow_probe_ > std::chrono::seconds(1) || step == start_step_) {
    last_slow_probe_ = Clock::now();
    refreshThreads();
    if (receiver_) reportControlDrops();
    if (emitter_) {
      int64_t ahp = model::anonHugePagesBytes();
      if (ahp >= 0) emitter_->setGauge(MetricId::kAnonHugePagesBytes, double(ahp));
    }
  }
  if (o_.eval_every > 0 && o_.rank == 0 && (step + 1) % uint64_t(o_.eval_every) == 0) {
    double acc = testAccuracy();
    if (emitter_) emitter_->setGauge(MetricId::kAccuracy, acc);
    log("step %" PRIu64 " loss %.4f test accuracy %.4f", step + 1, loss_, acc);
  }
  if (o_.checkpoint_every > 0 && (step + 1) % uint64_t(o_.checkpoint_every) == 0)
    checkpoint(step + 1);
}

void RankRunner::checkpoint(uint64_t step_done) {
  if (emitter_) emitter_->setGauge(MetricId::kCheckpointActive, 1);
  if (o_.rank == 0) {
    copyModelToHost();
    model::CheckpointState st;
    st.step = step_done;
    // The configuration the next step runs with, so the resumed run switches where this one does.
    const control::ConfigWord next = sync_->nextStepConfig();
    st.config_epoch = next.epoch;
    st.topology = uint8_t(next.topology);
    st.pinning = uint8_t(next.pinning);
    st.seed = o_.seed;
    st.model = o_.model.name;
    // A full disk or an I/O error costs this checkpoint, not the run: writeCheckpoint removed its
    // temp file, so the previous checkpoint stays the newest valid one and a resume picks it.
    try {
      model::writeCheckpoint(o_.checkpoint_dir, st, model_->parameters(), model_->momentum());
    } catch (const std::exception& e) {
      ++checkpoint_failures_;
      if (emitter_) emitter_->addCounter(MetricId::kCheckpointFailures, 1);
      std::fprintf(stderr,
                   "bpftrain-train: rank 0: checkpoint at step %" PRIu64 " not written (%" PRIu64
                   " so far), training goes on: %s\n",
                   step_done, checkpoint_failures_, e.what());
    }
  }
  if (emitter_) emitter_->setGauge(MetricId::kCheckpointActive, 0);
}

int RankRunner::run() {
  setUpModel();
  connect();
  startTelemetry();
  maybeResume();
  copyModelToDevice();
  warmTopologies();
  startControl();
  if (emitter_) {
    emitter_->start();
    publishConfig();
    emitter_->setGauge(MetricId::kCheckpointActive, 0);
  }
  refreshThreads();
  applyPinning(config().pinning);
  log("world %d (%s), local rank %d/%d, model %s (%zu parameters, %.1f MiB), topology %s, pin %s, "
      "steps %" PRIu64 "..%" PRIu64 ", allreduce in %zu bucket%s",
      o_.world, o_.rank_source.c_str(), local_rank_, local_world_, o_.model.name.c_str(),
      model_->parameterCount(), double(model_->parameterCount()) * 4 / (1 << 20),
      topologyLabel(config().topology).c_str(), std::string(pinModeName(config().pinning)).c_str(),
      start_step_, o_.steps, buckets_->size(), buckets_->size() == 1 ? "" : "s");

  const float grad_scale = 1.0f / float(o_.world);
  StepTotals totals;
  uint64_t end_step = o_.steps;
  const auto train_start = Clock::now();
  sync_->start(train_start);
  for (uint64_t step = start_step_; step < o_.steps; ++step) {
    const bool features_on = hooks_->featuresOn(step);
    const auto t0 = Clock::now();
    if (emitter_ && features_on)
      emitter_->stepStarted(
          uint64_t(
              std::chrono::duration_cast<std::chrono::nanoseconds>(t0.time_since_epoch()).count()),
          double(o_.batch));
    syncAtBoundary(step, features_on);
    // Inside the step's time: what the probe costs shows in samples/s.
    const double ring_probe_s = ringProbe(step, features_on);
    loss_ = computeGradients(step);
    const auto t1 = Clock::now();
    allreduceGradients(step, features_on);
    const auto t2 = Clock::now();
    applyGradients(grad_scale);
    const double step_s = seconds(Clock::now() - t0), allreduce_s = seconds(t2 - t1);
    totals.step_s += step_s;
    totals.compute_s += seconds(t1 - t0);
    totals.allreduce_s += allreduce_s;
    sync_->observe(step_s, allreduce_s);
    afterStep(step, features_on, step_s, allreduce_s, ring_probe_s);
    if (o_.resume && o_.rank == 0 && step == start_step_)
      std::fprintf(stderr, "bpftrain-train: rank 0: %s step %" PRIu64 "\n",
                   launcher::kFirstResumedStepMarker, step + 1);  // the launcher times restarts
    hooks_->recordStep(features_on, seconds(Clock::now() - t0));
    if (sync_->stopRequested()) {
      end_step = step + 1;
      log("--duration %.1f s reached: stopped after step %" PRIu64 " (%.1f s of training)",
          double(o_.duration_s), end_step, seconds(Clock::now() - train_start));
      break;
    }
  }
  report(end_step, totals);
  // Keep every rank alive until all are done, so no one sees a peer vanish mid-collective.
  comm_->barrier();
  return 0;
}

void RankRunner::report(uint64_t end_step, const StepTotals& totals) {
  const double accuracy = testAccuracy();
  copyModelToHost();  // for params_hash
  if (emitter_) {
    emitter_->setGauge(MetricId::kAccuracy, accuracy);
    emitter_->stop();  // flushes what is pending
  }
  std::printf(
      "bpftrain-train: rank %d: final step %" PRIu64
      " loss %.4f test_accuracy %.4f "
      "epoch %" PRIu64 " topology %s pinning %s params_hash 0x%016" PRIx64 "\n",
      o_.rank, end_step, loss_, accuracy, config().epoch, topologyLabel(config().topology).c_str(),
      std::string(pinModeName(config().pinning)).c_str(), model::hashFloats(model_->parameters()));
  const double bytes = double(model_->parameterCount()) * sizeof(float);
  const double n_steps = double(std::max<uint64_t>(1, end_step - std::min(end_step, start_step_)));
  std::printf(
      "bpftrain-train: rank %d: mean step %.6f s (compute %.6f s, allreduce %.6f s, "
      "busbw %.3g B/s) anon_hugepages %" PRId64 " bytes\n",
      o_.rank, totals.step_s / n_steps, totals.compute_s / n_steps, totals.allreduce_s / n_steps,
      collective::busBandwidth(bytes, totals.allreduce_s / n_steps, o_.world),
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
    // Slow buckets' broadcasts (ConfigSync::bucketSyncs; every rank ran the same ones), and what
    // all broadcast syncs (at step boundaries too) cost: the control path's share of the step.
    std::printf("bpftrain-train: rank 0: bucket syncs %" PRIu64 "\n", sync_->bucketSyncs());
    std::printf("bpftrain-train: rank 0: broadcast syncs %" PRIu64 " mean %.2f ms\n", broadcasts_,
                broadcasts_ > 0 ? broadcast_s_ / double(broadcasts_) * 1e3 : 0.0);
    // What the ring probe cost (control/ring_probe.h): part of the mean step above.
    std::printf("bpftrain-train: rank 0: ring probes %" PRIu64 " mean %.2f ms\n", ring_probes_,
                ring_probes_ > 0 ? ring_probe_s_ / double(ring_probes_) * 1e3 : 0.0);
  }
  if (emitter_)
    std::printf("bpftrain-train: rank %d: telemetry frames %" PRIu64 " dropped samples %" PRIu64
                "\n",
                o_.rank, emitter_->framesSent(), emitter_->dropped());
  hooks_->report(o_.rank);
  std::fflush(stdout);
}

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
