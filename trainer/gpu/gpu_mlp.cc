#include "trainer/gpu/gpu_mlp.h"

#include <algorithm>
#include <stdexcept>

namespace bpftrain::trainer::gpu {
namespace {

constexpr unsigned kBlock = 256;
constexpr uint64_t kMaxBlocks = 1024;  // the kernels loop over what a bounded grid does not cover

#define BPFTRAIN_CUBLASCHECK(call)                                                    \
  do {                                                                                \
    cublasStatus_t s_ = (call);                                                       \
    if (s_ != CUBLAS_STATUS_SUCCESS)                                                  \
      throw std::runtime_error(std::string(__FILE__ ":") + std::to_string(__LINE__) + \
                               ": " #call ": " + lib_.cublasGetStatusString(s_));     \
  } while (0)

}  // namespace

void GpuMlp::check(cudaError_t e, const char* what) const {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string("GPU model: ") + what + ": " + lib_.cudaGetErrorString(e));
}

template <typename T>
T* GpuMlp::allocate(size_t count) {
  void* p = nullptr;
  check(lib_.cudaMalloc(&p, std::max<size_t>(count, 1) * sizeof(T)), "cudaMalloc");
  allocations_.push_back(p);
  return static_cast<T*>(p);
}

// The arguments are taken by value with the kernels' exact parameter types; cudaLaunchKernel
// reads them through argv before it returns. A cudaKernel_t is launched cast to a function
// pointer (the runtime API accepts library kernels there since CUDA 12).
template <typename... Args>
void GpuMlp::launch(Kernel k, uint64_t work, Args... args) {
  void* argv[] = {static_cast<void*>(&args)...};
  const uint64_t blocks = std::clamp<uint64_t>((work + kBlock - 1) / kBlock, 1, kMaxBlocks);
  check(lib_.cudaLaunchKernel(reinterpret_cast<const void*>(kernels_[size_t(k)]),
                              dim3(unsigned(blocks)), dim3(kBlock), argv, 0, stream_),
        kKernelNames[size_t(k)]);
}

GpuMlp::GpuMlp(const model::ModelSpec& spec, const model::Dataset& train,
               const model::Dataset& test, int max_batch, size_t gradient_tail, cudaStream_t stream,
               const GpuLibrary& lib)
    : lib_(lib), spec_(spec), max_batch_(max_batch), tail_(gradient_tail), stream_(stream) {
  // The CPU Mlp's layout: per layer W (in x out, row-major) then b, in one flat buffer.
  int in = spec.inputs;
  for (int l = 0; l <= spec.depth; ++l) {
    const int out = l == spec.depth ? spec.outputs : spec.width;
    Layer layer{in, out, param_count_, param_count_ + size_t(in) * size_t(out)};
    param_count_ = layer.b + size_t(out);
    layers_.push_back(layer);
    in = out;
  }
  try {
    int device = 0, major = 0, minor = 0;
    check(lib_.cudaGetDevice(&device), "cudaGetDevice");
    check(lib_.cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device),
          "compute capability");
    check(lib_.cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device),
          "compute capability");
    arch_ = archForDevice(lib_, major, minor);
    const std::string image = compileKernels(lib_, arch_);
    check(
        lib_.cudaLibraryLoadData(&library_, image.data(), nullptr, nullptr, 0, nullptr, nullptr, 0),
        "cudaLibraryLoadData (the NVRTC-compiled kernels)");
    for (size_t k = 0; k < kernels_.size(); ++k)
      check(lib_.cudaLibraryGetKernel(&kernels_[k], library_, kKernelNames[k]), kKernelNames[k]);
    BPFTRAIN_CUBLASCHECK(lib_.cublasCreate_v2(&blas_));
    BPFTRAIN_CUBLASCHECK(lib_.cublasSetStream_v2(blas_, stream_));
    // FP32 throughout (no TF32), as the CPU model computes.
    BPFTRAIN_CUBLASCHECK(lib_.cublasSetMathMode(blas_, CUBLAS_DEFAULT_MATH));

    params_ = allocate<float>(param_count_);
    grads_ = allocate<float>(param_count_ + tail_);
    velocity_ = allocate<float>(param_count_);
    size_t widest = size_t(std::max(spec.inputs, std::max(spec.width, spec.outputs)));
    act_.assign(layers_.size() + 1, nullptr);
    for (size_t l = 0; l < layers_.size(); ++l)
      act_[l + 1] = allocate<float>(size_t(max_batch) * size_t(layers_[l].out));
    delta_ = allocate<float>(size_t(max_batch) * widest);
    delta_prev_ = allocate<float>(size_t(max_batch) * widest);
    batch_x_ = allocate<float>(size_t(max_batch) * size_t(spec.inputs));
    batch_y_ = allocate<int>(size_t(max_batch));
    rows_ = allocate<uint32_t>(size_t(max_batch));
    row_loss_ = allocate<double>(size_t(max_batch));
    loss_ = allocate<float>(1);
    correct_ = allocate<unsigned>(1);
    features_ = train.features;
    if (features_ != spec.inputs || test.features != spec.inputs)
      throw std::runtime_error("GPU model: the data set has " + std::to_string(features_) +
                               " features, the model " + std::to_string(spec.inputs) + " inputs");
    train_x_ = allocate<float>(train.x.size());
    train_y_ = allocate<int>(train.y.size());
    test_x_ = allocate<float>(test.x.size());
    test_y_ = allocate<int>(test.y.size());
    test_rows_ = test.rows();
    auto up = [&](void* dst, const void* src, size_t bytes) {
      check(lib_.cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_),
            "copying the data set");
    };
    up(train_x_, train.x.data(), train.x.size() * sizeof(float));
    up(train_y_, train.y.data(), train.y.size() * sizeof(int));
    up(test_x_, test.x.data(), test.x.size() * sizeof(float));
    up(test_y_, test.y.data(), test.y.size() * sizeof(int));
    check(lib_.cudaMemsetAsync(grads_, 0, (param_count_ + tail_) * sizeof(float), stream_),
          "cudaMemsetAsync");
    check(lib_.cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  } catch (...) {
    release();  // a throwing constructor runs no destructor
    throw;
  }
}

GpuMlp::~GpuMlp() { release(); }

void GpuMlp::release() {
  for (void* p : allocations_) lib_.cudaFree(p);
  allocations_.clear();
  if (blas_ != nullptr) lib_.cublasDestroy_v2(blas_);
  blas_ = nullptr;
  if (library_ != nullptr) lib_.cudaLibraryUnload(library_);
  library_ = nullptr;
}

void GpuMlp::upload(std::span<const float> params, std::span<const float> momentum) {
  if (params.size() != param_count_ || momentum.size() != param_count_)
    throw std::runtime_error("GPU model: host parameters do not match the device layout");
  check(lib_.cudaMemcpyAsync(params_, params.data(), params.size_bytes(), cudaMemcpyHostToDevice,
                             stream_),
        "uploading parameters");
  check(lib_.cudaMemcpyAsync(velocity_, momentum.data(), momentum.size_bytes(),
                             cudaMemcpyHostToDevice, stream_),
        "uploading momentum");
  check(lib_.cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void GpuMlp::download(std::span<float> params, std::span<float> momentum) {
  if (params.size() != param_count_ || momentum.size() != param_count_)
    throw std::runtime_error("GPU model: host parameters do not match the device layout");
  check(lib_.cudaMemcpyAsync(params.data(), params_, params.size_bytes(), cudaMemcpyDeviceToHost,
                             stream_),
        "downloading parameters");
  check(lib_.cudaMemcpyAsync(momentum.data(), velocity_, momentum.size_bytes(),
                             cudaMemcpyDeviceToHost, stream_),
        "downloading momentum");
  check(lib_.cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

// Row-major C = op(A) op(B) as cuBLAS's column-major sees it: a row-major matrix is its
// transpose, so the operands swap (C^T = op(B)^T op(A)^T) and the callers pass them that way.
void GpuMlp::gemm(bool ta, bool tb, int m, int n, int k, const float* a, int lda, const float* b,
                  int ldb, float* c, int ldc) {
  const float one = 1.0f, zero = 0.0f;
  BPFTRAIN_CUBLASCHECK(lib_.cublasSgemm_v2(blas_, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
                                           tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &one, a, lda, b,
                                           ldb, &zero, c, ldc));
}

void GpuMlp::forward(const float* input, int n) {
  act_[0] = const_cast<float*>(input);
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& L = layers_[l];
    // out (n x out) = act (n x in) W (in x out): column-major out^T = W^T act^T.
    gemm(false, false, L.out, n, L.in, params_ + L.w, L.out, act_[l], L.in, act_[l + 1], L.out);
    const int relu = l + 1 < layers_.size() ? 1 : 0;
    launch(Kernel::kBiasAct, uint64_t(n) * uint64_t(L.out), act_[l + 1],
           static_cast<const float*>(params_ + L.b), n, L.out, relu);
  }
}

float GpuMlp::computeGradients(std::span<const uint32_t> batch) {
  const int n = int(batch.size());
  if (n < 1 || n > max_batch_) throw std::runtime_error("GPU model: batch larger than max_batch");
  check(lib_.cudaMemcpyAsync(rows_, batch.data(), batch.size_bytes(), cudaMemcpyHostToDevice,
                             stream_),
        "copying the batch's rows");
  launch(Kernel::kGatherRows, uint64_t(n) * uint64_t(features_),
         static_cast<const float*>(train_x_), static_cast<const int*>(train_y_),
         static_cast<const unsigned*>(rows_), n, features_, batch_x_, batch_y_);
  forward(batch_x_, n);
  const Layer& last = layers_.back();
  launch(Kernel::kSoftmaxXent, uint64_t(n), static_cast<const float*>(act_.back()),
         static_cast<const int*>(batch_y_), n, last.out, delta_, row_loss_);
  launch(Kernel::kMeanLoss, 1, static_cast<const double*>(row_loss_), n, loss_);
  float* delta = delta_;
  float* delta_prev = delta_prev_;
  for (size_t l = layers_.size(); l-- > 0;) {
    const Layer& L = layers_[l];
    // dW (in x out) = a^T delta: column-major dW^T = delta^T a.
    gemm(false, true, L.out, L.in, n, delta, L.out, act_[l], L.in, grads_ + L.w, L.out);
    launch(Kernel::kColumnSums, uint64_t(L.out), static_cast<const float*>(delta), n, L.out,
           grads_ + L.b);
    if (l == 0) break;
    // delta_prev (n x in) = delta W^T: column-major delta_prev^T = W delta^T.
    gemm(true, false, L.in, n, L.out, params_ + L.w, L.out, delta, L.out, delta_prev, L.in);
    launch(Kernel::kReluMask, uint64_t(n) * uint64_t(L.in), delta_prev,
           static_cast<const float*>(act_[l]),
           static_cast<unsigned long long>(uint64_t(n) * uint64_t(L.in)));
    std::swap(delta, delta_prev);
  }
  float loss = 0;
  check(lib_.cudaMemcpyAsync(&loss, loss_, sizeof(loss), cudaMemcpyDeviceToHost, stream_),
        "reading the loss");
  check(lib_.cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return loss;
}

void GpuMlp::uploadTail(std::span<const float> tail) {
  if (tail.size() != tail_) throw std::runtime_error("GPU model: tail size mismatch");
  if (tail_ == 0) return;
  check(lib_.cudaMemcpyAsync(grads_ + param_count_, tail.data(), tail.size_bytes(),
                             cudaMemcpyHostToDevice, stream_),
        "uploading the control words");
}

void GpuMlp::downloadTail(std::span<float> tail) {
  if (tail.size() != tail_) throw std::runtime_error("GPU model: tail size mismatch");
  if (tail_ > 0)
    check(lib_.cudaMemcpyAsync(tail.data(), grads_ + param_count_, tail.size_bytes(),
                               cudaMemcpyDeviceToHost, stream_),
          "downloading the control words");
  check(lib_.cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
}

void GpuMlp::applyGradients(float lr, float momentum, float grad_scale) {
  launch(Kernel::kSgdMomentum, uint64_t(param_count_), params_, velocity_,
         static_cast<const float*>(grads_), static_cast<unsigned long long>(param_count_), lr,
         momentum, grad_scale);
}

double GpuMlp::accuracy() {
  check(lib_.cudaMemsetAsync(correct_, 0, sizeof(unsigned), stream_), "cudaMemsetAsync");
  for (size_t start = 0; start < test_rows_; start += size_t(max_batch_)) {
    const int n = int(std::min(size_t(max_batch_), test_rows_ - start));
    forward(test_x_ + start * size_t(features_), n);
    launch(Kernel::kCountCorrect, uint64_t(n), static_cast<const float*>(act_.back()),
           static_cast<const int*>(test_y_ + start), n, spec_.outputs, correct_);
  }
  unsigned correct = 0;
  check(lib_.cudaMemcpyAsync(&correct, correct_, sizeof(correct), cudaMemcpyDeviceToHost, stream_),
        "reading the accuracy");
  check(lib_.cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  return test_rows_ == 0 ? 0.0 : double(correct) / double(test_rows_);
}

}  // namespace bpftrain::trainer::gpu
