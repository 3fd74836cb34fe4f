#include "trainer/gpu/kernels.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace bpftrain::trainer::gpu {

// Grid-stride loops throughout: launches use a bounded grid whatever the size. Sums keep the CPU
// model's order and precision (double for the softmax denominator and the loss, row order for
// the bias gradient), and NVRTC runs with --fmad=false so a*b+c rounds as the CPU's does.
const char* const kKernelSource = R"CUDA(
typedef unsigned long long u64;
#define BPFTRAIN_FOR(i, n) \
  for (u64 i = u64(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += u64(gridDim.x) * blockDim.x)

// out[i, f] = x[rows[i], f]; labels[i] = y[rows[i]]: the batch from the device-resident data set.
extern "C" __global__ void bpftrain_gather_rows(const float* x, const int* y, const unsigned* rows,
                                                int n, int features, float* out, int* labels) {
  BPFTRAIN_FOR(i, u64(n) * features) {
    const u64 r = i / features, f = i % features;
    out[i] = x[u64(rows[r]) * features + f];
  }
  BPFTRAIN_FOR(i, u64(n)) labels[i] = y[rows[i]];
}

// out = out + bias (row broadcast), then ReLU on hidden layers.
extern "C" __global__ void bpftrain_bias_act(float* out, const float* bias, int n, int width,
                                             int relu) {
  BPFTRAIN_FOR(i, u64(n) * width) {
    const float v = out[i] + bias[i % width];
    out[i] = relu && v < 0.0f ? 0.0f : v;  // std::max(v, 0.0f)
  }
}

// Softmax cross-entropy per row: delta = (softmax(z) - onehot(label)) / n, row_loss in double.
extern "C" __global__ void bpftrain_softmax_xent(const float* logits, const int* labels, int n,
                                                 int classes, float* delta, double* row_loss) {
  BPFTRAIN_FOR(i, u64(n)) {
    const float* z = logits + i * classes;
    float* g = delta + i * classes;
    float zmax = z[0];
    for (int k = 1; k < classes; ++k) zmax = z[k] > zmax ? z[k] : zmax;
    double sum = 0;
    for (int k = 0; k < classes; ++k) sum += exp(double(z[k] - zmax));
    const int label = labels[i];
    row_loss[i] = log(sum) - double(z[label] - zmax);
    for (int k = 0; k < classes; ++k) g[k] = float(exp(double(z[k] - zmax)) / sum) / float(n);
    g[label] -= 1.0f / float(n);
  }
}

// The batch-mean loss, summed in row order by one thread (n is a batch: small).
extern "C" __global__ void bpftrain_mean_loss(const double* row_loss, int n, float* loss) {
  if (blockIdx.x != 0 || threadIdx.x != 0) return;
  double s = 0;
  for (int i = 0; i < n; ++i) s += row_loss[i];
  *loss = float(s / n);
}

// db[k] = sum over rows of delta[i, k], in row order.
extern "C" __global__ void bpftrain_column_sums(const float* delta, int n, int width, float* db) {
  BPFTRAIN_FOR(k, u64(width)) {
    float s = 0.0f;
    for (int i = 0; i < n; ++i) s += delta[u64(i) * width + k];
    db[k] = s;
  }
}

// delta_prev = delta_prev * relu'(a).
extern "C" __global__ void bpftrain_relu_mask(float* delta_prev, const float* a, u64 count) {
  BPFTRAIN_FOR(i, count) if (a[i] <= 0.0f) delta_prev[i] = 0.0f;
}

// SGD with momentum on the averaged gradient: v = mu v + scale g; p -= lr v.
extern "C" __global__ void bpftrain_sgd_momentum(float* p, float* v, const float* g, u64 count,
                                                 float lr, float mu, float scale) {
  BPFTRAIN_FOR(i, count) {
    v[i] = mu * v[i] + scale * g[i];
    p[i] -= lr * v[i];
  }
}

// correct += rows whose first largest logit is the label (std::max_element's tie rule).
extern "C" __global__ void bpftrain_count_correct(const float* logits, const int* labels, int n,
                                                  int classes, unsigned* correct) {
  BPFTRAIN_FOR(i, u64(n)) {
    const float* z = logits + i * classes;
    int best = 0;
    for (int k = 1; k < classes; ++k)
      if (z[k] > z[best]) best = k;
    if (best == labels[i]) atomicAdd(correct, 1u);
  }
}
)CUDA";

namespace {

std::string oneLine(std::string s) {
  std::replace(s.begin(), s.end(), '\n', ' ');
  while (!s.empty() && (s.back() == ' ' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace

std::string compileKernels(const GpuLibrary& lib, const std::string& arch) {
  const bool cubin = arch.starts_with("sm_");
  nvrtcProgram prog = nullptr;
  nvrtcResult r =
      lib.nvrtcCreateProgram(&prog, kKernelSource, "bpftrain_kernels.cu", 0, nullptr, nullptr);
  if (r != NVRTC_SUCCESS)
    throw std::runtime_error(std::string("nvrtcCreateProgram: ") + lib.nvrtcGetErrorString(r));
  struct Destroy {
    const GpuLibrary& lib;
    nvrtcProgram* prog;
    ~Destroy() { lib.nvrtcDestroyProgram(prog); }
  } destroy{lib, &prog};
  const std::string arch_option = "--gpu-architecture=" + arch;
  const char* options[] = {arch_option.c_str(), "--fmad=false", "--std=c++17"};
  r = lib.nvrtcCompileProgram(prog, 3, options);
  if (r != NVRTC_SUCCESS) {
    size_t size = 0;
    std::string log;
    if (lib.nvrtcGetProgramLogSize(prog, &size) == NVRTC_SUCCESS && size > 1) {
      log.resize(size);
      lib.nvrtcGetProgramLog(prog, log.data());
    }
    throw std::runtime_error("NVRTC cannot compile the GPU model's kernels for " + arch + " (" +
                             lib.nvrtcGetErrorString(r) + "): " + oneLine(log));
  }
  size_t size = 0;
  std::string image;
  r = cubin ? lib.nvrtcGetCUBINSize(prog, &size) : lib.nvrtcGetPTXSize(prog, &size);
  if (r == NVRTC_SUCCESS) {
    image.resize(size);
    r = cubin ? lib.nvrtcGetCUBIN(prog, image.data()) : lib.nvrtcGetPTX(prog, image.data());
  }
  if (r != NVRTC_SUCCESS)
    throw std::runtime_error(std::string("NVRTC: cannot read the compiled kernels: ") +
                             lib.nvrtcGetErrorString(r));
  return image;  // PTX keeps its terminating NUL, as cudaLibraryLoadData wants
}

std::string archForDevice(const GpuLibrary& lib, int major, int minor) {
  int count = 0;
  std::vector<int> archs;
  if (lib.nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
    archs.resize(size_t(count));
    if (lib.nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) archs.clear();
  }
  const int device = major * 10 + minor;
  int best = 0;
  for (int a : archs)
    if (a <= device) best = std::max(best, a);
  if (best == 0)
    throw std::runtime_error(
        "NVRTC supports no architecture at or below the GPU's compute "
        "capability " +
        std::to_string(major) + "." + std::to_string(minor) +
        ": install a CUDA toolkit that supports this GPU");
  return "sm_" + std::to_string(best);
}

}  // namespace bpftrain::trainer::gpu
