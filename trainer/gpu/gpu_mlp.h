// The CPU Mlp's model (trainer/model/mlp.h) resident on the GPU for --backend nccl: parameters,
// gradients (with the control-word tail), momentum, activations and both data sets live in device
// memory; GEMMs are cuBLAS, the element-wise steps NVRTC-compiled kernels (kernels.h). Same layer
// layout in one flat buffer, same batch-mean gradient and SGD-momentum formula, so a run compares
// with a CPU one; the gradient allreduce runs in place on gradientsWithTail(). Everything is
// allocated in the constructor: a step allocates nothing.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "trainer/gpu/gpu_library.h"
#include "trainer/gpu/kernels.h"
#include "trainer/model/dataset.h"
#include "trainer/model/mlp.h"

namespace bpftrain::trainer::gpu {

class GpuMlp {
 public:
  // On the calling thread's current device, every operation ordered on `stream` (the NCCL
  // communicator's, so the allreduce follows the backward pass without a host round trip).
  // Throws std::runtime_error, one line, when CUDA, cuBLAS or NVRTC fail.
  GpuMlp(const model::ModelSpec& spec, const model::Dataset& train, const model::Dataset& test,
         int max_batch, size_t gradient_tail, cudaStream_t stream,
         const GpuLibrary& lib = gpuLibrary());
  ~GpuMlp();
  GpuMlp(const GpuMlp&) = delete;
  GpuMlp& operator=(const GpuMlp&) = delete;

  // Host <-> device copies of the parameters and momentum (He init bits from the CPU Mlp, a
  // checkpoint resumed, or one to write). download() waits for the stream.
  void upload(std::span<const float> params, std::span<const float> momentum);
  void download(std::span<float> params, std::span<float> momentum);

  // Forward + backward over `batch` (rows of the training set): the batch-mean gradient in
  // gradientsWithTail()'s head. Returns the mean loss (waits for the stream).
  float computeGradients(std::span<const uint32_t> batch);
  // The tail's control words, host <-> device around the allreduce (downloadTail waits).
  void uploadTail(std::span<const float> tail);
  void downloadTail(std::span<float> tail);
  // SGD with momentum on the (already summed) gradient; enqueued.
  void applyGradients(float lr, float momentum, float grad_scale);
  // Classification accuracy over the test set (waits for the stream).
  double accuracy();

  float* gradientsWithTail() { return grads_; }
  size_t gradientsWithTailCount() const { return param_count_ + tail_; }
  size_t parameterCount() const { return param_count_; }
  const std::string& arch() const { return arch_; }

 private:
  struct Layer {
    int in, out;
    size_t w, b;
  };
  template <typename T>
  T* allocate(size_t count);
  template <typename... Args>
  void launch(Kernel k, uint64_t work, Args... args);
  void forward(const float* input, int n);
  void gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b, int ldb,
            float* c, int ldc);
  void check(cudaError_t e, const char* what) const;
  void release();

  const GpuLibrary& lib_;
  model::ModelSpec spec_;
  int max_batch_;
  size_t tail_;
  cudaStream_t stream_;
  std::vector<Layer> layers_;
  size_t param_count_ = 0;
  std::vector<void*> allocations_;
  cudaLibrary_t library_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  std::array<cudaKernel_t, size_t(Kernel::kCount)> kernels_{};
  std::string arch_;
  float *params_ = nullptr, *grads_ = nullptr, *velocity_ = nullptr;
  std::vector<float*> act_;  // act_[l+1]: output of layer l; act_[0] is set per call
  float *delta_ = nullptr, *delta_prev_ = nullptr, *batch_x_ = nullptr, *loss_ = nullptr;
  int* batch_y_ = nullptr;
  uint32_t* rows_ = nullptr;
  double* row_loss_ = nullptr;
  unsigned* correct_ = nullptr;
  float *train_x_ = nullptr, *test_x_ = nullptr;
  int *train_y_ = nullptr, *test_y_ = nullptr;
  size_t test_rows_ = 0;
  int features_ = 0;
};

}  // namespace bpftrain::trainer::gpu
