// RankRunner, one training rank, declared for its two source files: rank_runner.cc (set-up, the
// step loop, checkpoints, the closing report) and rank_runner_control.cc (where decisions come
// from and how every rank applies them at the same step, the warm-up of every topology, the ring
// probe). Internal to trainer/app: the rest of the trainer calls runRank (rank_runner.h).
#pragma once

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "trainer/app/options.h"
#include "trainer/app/run_hooks.h"
#include "trainer/collective/communicator.h"
#include "trainer/collective/gradient_buckets.h"
#include "trainer/control/config_sync.h"
#include "trainer/control/control_receiver.h"
#include "trainer/control/verifier.h"
#include "trainer/model/dataset.h"
#include "trainer/model/mlp.h"
#include "trainer/pinning/pinner.h"
#include "trainer/telemetry/emitter.h"

#ifdef BPFTRAIN_WITH_NCCL_BACKEND
#include "trainer/app/nccl_communicator.h"
#include "trainer/gpu/gpu_mlp.h"
#endif

namespace bpftrain::trainer::app {

using Clock = std::chrono::steady_clock;

inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Bit t set: Topology t runs over `transport` (every one today; see topologyUnsupported).
uint32_t runnableTopologies(const std::string& transport);

// Sums over the steps this run trained, for the closing line.
struct StepTotals {
  double step_s = 0, compute_s = 0, allreduce_s = 0;
};

class RankRunner {
 public:
  explicit RankRunner(const Options& o) : o_(o) {}
  int run();

 private:
  void setUpModel();
  void connect();
  void startTelemetry();
  void startControl();
  void maybeResume();
  void applyPinning(PinMode mode);
  void refreshThreads();
  void reportControlDrops();
  void syncAtBoundary(uint64_t step, bool features_on);
  void broadcastWord(uint64_t step, std::span<uint8_t, control::kSyncWordBytes> word);
  // bucket > 0: applied inside the step, after that many of its gradient buckets.
  void applySwitch(const control::Switch& s, uint64_t step, size_t bucket = 0);
  void publishConfig();
  // The ring probe's seconds (control/ring_probe.h), or -1 when this step ran none.
  double ringProbe(uint64_t step, bool features_on);
  void warmTopologies();
  void afterStep(uint64_t step, bool features_on, double step_s, double allreduce_s,
                 double ring_probe_s);
  void checkpoint(uint64_t step_done);
  void report(uint64_t end_step, const StepTotals& totals);
  // The step's model operations: on the GPU model for --backend nccl, else the CPU Mlp.
  float computeGradients(uint64_t step);
  void allreduceGradients(uint64_t step, bool features_on);
  void applyGradients(float grad_scale);
  double testAccuracy();
  void copyModelToHost();    // the GPU model's parameters and momentum into model_ (checkpoints)
  void copyModelToDevice();  // model_'s (He init or a resumed checkpoint) onto the GPU
  void setUpNccl(const collective::CommOptions& co);
  std::string topologyLabel(Topology t) const;
  const control::ConfigWord& config() const { return sync_->config(); }
  void log(const char* fmt, ...) __attribute__((format(printf, 2, 3)));

  const Options& o_;
  std::optional<model::Split> split_;
  std::optional<model::Sharder> sharder_;
  std::unique_ptr<model::Mlp> model_;
  std::unique_ptr<collective::Communicator> comm_;
  std::optional<collective::GradientBuckets> buckets_;  // --allreduce-buckets (Gloo)
#ifdef BPFTRAIN_WITH_NCCL_BACKEND
  NcclCommunicator* nccl_ = nullptr;  // comm_ when --backend nccl
  // --backend nccl trains here; model_ stays the host copy (initial bits, checkpoints, pinning).
  std::unique_ptr<gpu::GpuMlp> gpu_;
#endif
  std::unique_ptr<pinning::Pinner> pinner_;
  std::unique_ptr<telemetry::Emitter> emitter_;
  std::unique_ptr<control::Verifier> verifier_;
  std::unique_ptr<control::ControlReceiver> receiver_;
  std::optional<control::ReceiverSource> decisions_;
  std::optional<RunHooks> hooks_;
  std::optional<control::ConfigSync> sync_;
  control::ConfigWord resumed_config_;  // from the command line, or the checkpoint resumed
  uint64_t start_step_ = 0;
  uint64_t checkpoint_failures_ = 0;
  uint64_t control_drops_reported_ = 0;
  int local_rank_ = 0, local_world_ = 1;
  double loss_ = 0;
  Clock::time_point last_slow_probe_;
  std::vector<float> ring_probe_;  // --adaptive on Gloo: the probe's buffer, else empty
  uint64_t ring_probes_ = 0;
  double ring_probe_s_ = 0;  // summed, for the closing line
  uint64_t broadcasts_ = 0;  // boundary and bucket syncs by broadcast
  double broadcast_s_ = 0;   // summed, for the closing line
  std::set<pid_t> compute_tids_;
  std::vector<pid_t> known_tids_;
};

}  // namespace bpftrain::trainer::app
