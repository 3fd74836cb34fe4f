// The GPU model's loader and kernels against the CUDA installed where the build found it, no GPU
// needed: every function resolves and answers through its pointer, a missing library is one line
// naming the fix, and NVRTC compiles every kernel (a syntax error in kernels.cuh fails here, not
// first on a GPU machine). Then GpuMlp itself runs on the CPU: kernels.cuh compiled as host C++
// behind a GpuLibrary whose runtime and cuBLAS entries are host emulations (memory is host
// memory, a launch runs the kernel's grid-stride loop in one thread, Sgemm is the column-major
// definition), and its gradients, loss, updates and accuracy are compared with the CPU Mlp's.
#include "trainer/gpu/gpu_library.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "trainer/gpu/gpu_mlp.h"
#include "trainer/gpu/kernels.h"
#include "trainer/model/dataset.h"
#include "trainer/model/mlp.h"

// The kernels as host functions: every thread index is 0 and the grid one thread wide, so each
// grid-stride loop covers all of its range.
namespace bpftrain_host_kernels {
struct Dim {
  unsigned x;
};
constexpr Dim blockIdx{0}, threadIdx{0}, blockDim{1}, gridDim{1};
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p += v;
  return old;
}
#pragma push_macro("__global__")  // the CUDA headers define it
#undef __global__
#define __global__
#include "trainer/gpu/kernels.cuh"
#pragma pop_macro("__global__")
#undef BPFTRAIN_FOR
}  // namespace bpftrain_host_kernels

namespace bpftrain::trainer::gpu {
namespace {

TEST(GpuLibrary, ResolvesEveryFunctionTheModelCalls) {
  const auto lib = loadGpuLibrary();
  int slots = 0;
#define BPFTRAIN_EXPECT_SLOT(name)        \
  EXPECT_NE(lib->name, nullptr) << #name; \
  ++slots;
  BPFTRAIN_GPU_CUDART_FUNCTIONS(BPFTRAIN_EXPECT_SLOT)
  BPFTRAIN_EXPECT_SLOT(cudaMalloc)
  BPFTRAIN_EXPECT_SLOT(cudaLaunchKernel)
  BPFTRAIN_CUBLAS_FUNCTIONS(BPFTRAIN_EXPECT_SLOT)
  BPFTRAIN_NVRTC_FUNCTIONS(BPFTRAIN_EXPECT_SLOT)
#undef BPFTRAIN_EXPECT_SLOT
  EXPECT_EQ(slots, 12 + 2 + 6 + 13);
  const std::string major = std::to_string(CUDART_VERSION / 1000);
  EXPECT_NE(lib->cublas_path.find("libcublas.so." + major), std::string::npos) << lib->cublas_path;
  EXPECT_NE(lib->nvrtc_path.find("libnvrtc.so." + major), std::string::npos) << lib->nvrtc_path;

  // Calls that need no GPU: the pointers are the functions their names say.
  int vmajor = 0, vminor = 0;
  ASSERT_EQ(lib->nvrtcVersion(&vmajor, &vminor), NVRTC_SUCCESS);
  EXPECT_EQ(vmajor, CUDART_VERSION / 1000);
  EXPECT_STREQ(lib->nvrtcGetErrorString(NVRTC_SUCCESS), "NVRTC_SUCCESS");
  EXPECT_STREQ(lib->cublasGetStatusString(CUBLAS_STATUS_SUCCESS), "success");
  EXPECT_STREQ(lib->cudaGetErrorString(cudaSuccess), "no error");
}

TEST(GpuLibrary, AMissingCublasIsNamedWithTheFix) {
  GpuLibraryNames names;
  names.cublas = "libcublas-bpftrain-absent.so.13";
  std::string e;
  try {
    loadGpuLibrary(names);
  } catch (const std::runtime_error& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("cannot load libcublas-bpftrain-absent.so.13"), std::string::npos) << e;
  EXPECT_NE(e.find("install cuBLAS"), std::string::npos) << e;
  EXPECT_NE(e.find("LD_LIBRARY_PATH"), std::string::npos) << e;
  EXPECT_NE(e.find("--backend gloo"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

// Every kernel is in the PTX by its unmangled name, for a virtual architecture (PTX) and a real
// one (the CUBIN the trainer loads), here an H100/H200's sm_90; and the architecture a device gets.
TEST(GpuKernels, NvrtcCompilesEveryKernel) {
  const GpuLibrary& lib = gpuLibrary();
  const std::string ptx = compileKernels(lib, "compute_75");
  ASSERT_FALSE(ptx.empty());
  for (const char* name : kKernelNames)
    EXPECT_NE(ptx.find(std::string(".entry ") + name + "("), std::string::npos) << name;
  const std::string cubin = compileKernels(lib, "sm_90");
  ASSERT_GE(cubin.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.data(),
                        "\x7f"
                        "ELF",
                        4),
            0);  // a CUBIN is an ELF image
  for (const char* name : kKernelNames) EXPECT_NE(cubin.find(name), std::string::npos) << name;

  // The architecture for a device: the newest this NVRTC supports that is not newer.
  EXPECT_EQ(archForDevice(lib, 9, 0), "sm_90");
  EXPECT_EQ(archForDevice(lib, 8, 6), "sm_86");
  // A device newer than this NVRTC knows gets the newest CUBIN this NVRTC can write.
  const std::string future = archForDevice(lib, 99, 9);
  EXPECT_TRUE(future.starts_with("sm_")) << future;
  EXPECT_THROW(archForDevice(lib, 1, 0), std::runtime_error);
}

TEST(GpuKernels, ACompileErrorIsOneLineWithNvrtcsLog) {
  std::string e;
  try {
    compileKernels(gpuLibrary(), "compute_1");
  } catch (const std::runtime_error& x) {
    e = x.what();
  }
  EXPECT_NE(e.find("NVRTC cannot compile"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

namespace emu {

namespace k = bpftrain_host_kernels;
using u64 = unsigned long long;

cudaError_t getDeviceCount(int* n) { return *n = 1, cudaSuccess; }
cudaError_t getDevice(int* d) { return *d = 0, cudaSuccess; }
const char* errorString(cudaError_t) { return "emulated"; }
cudaError_t deviceAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrComputeCapabilityMajor ? 9 : 0;
  return cudaSuccess;
}
cudaError_t mallocHost(void** p, size_t n) {
  return (*p = std::malloc(n)) ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t freeHost(void* p) { return std::free(p), cudaSuccess; }
cudaError_t memcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  return std::memcpy(d, s, n), cudaSuccess;
}
cudaError_t memsetAsync(void* d, int v, size_t n, cudaStream_t) {
  return std::memset(d, v, n), cudaSuccess;
}
cudaError_t synchronize(cudaStream_t) { return cudaSuccess; }
cudaError_t lastError() { return cudaSuccess; }
bool loaded_the_source = false;
cudaError_t libraryLoad(cudaLibrary_t* lib, const void* code, cudaJitOption*, void**, unsigned,
                        cudaLibraryOption*, void**, unsigned) {
  loaded_the_source =
      std::strncmp(static_cast<const char*>(code), kKernelSource, std::strlen(kKernelSource)) == 0;
  *lib = reinterpret_cast<cudaLibrary_t>(uintptr_t{1});
  return cudaSuccess;
}
// A kernel handle is its index in kKernelNames, plus one.
cudaError_t libraryKernel(cudaKernel_t* kernel, cudaLibrary_t, const char* name) {
  for (size_t i = 0; i < kKernelNames.size(); ++i)
    if (std::strcmp(kKernelNames[i], name) == 0)
      return *kernel = reinterpret_cast<cudaKernel_t>(uintptr_t(i + 1)), cudaSuccess;
  return cudaErrorSymbolNotFound;
}
cudaError_t libraryUnload(cudaLibrary_t) { return cudaSuccess; }
size_t launches = 0;
// Reads each argument as the kernel's parameter type: a caller passing another type (an int for
// a u64) reads wrong here as it would on the GPU.
template <typename T>
T arg(void** args, int i) {
  T v;
  std::memcpy(&v, args[i], sizeof(T));
  return v;
}
cudaError_t launch(const void* func, dim3, dim3, void** a, size_t, cudaStream_t) {
  ++launches;
  switch (Kernel(reinterpret_cast<uintptr_t>(func) - 1)) {
    case Kernel::kGatherRows:
      k::bpftrain_gather_rows(arg<const float*>(a, 0), arg<const int*>(a, 1),
                              arg<const unsigned*>(a, 2), arg<int>(a, 3), arg<int>(a, 4),
                              arg<float*>(a, 5), arg<int*>(a, 6));
      break;
    case Kernel::kBiasAct:
      k::bpftrain_bias_act(arg<float*>(a, 0), arg<const float*>(a, 1), arg<int>(a, 2),
                           arg<int>(a, 3), arg<int>(a, 4));
      break;
    case Kernel::kSoftmaxXent:
      k::bpftrain_softmax_xent(arg<const float*>(a, 0), arg<const int*>(a, 1), arg<int>(a, 2),
                               arg<int>(a, 3), arg<float*>(a, 4), arg<double*>(a, 5));
      break;
    case Kernel::kMeanLoss:
      k::bpftrain_mean_loss(arg<const double*>(a, 0), arg<int>(a, 1), arg<float*>(a, 2));
      break;
    case Kernel::kColumnSums:
      k::bpftrain_column_sums(arg<const float*>(a, 0), arg<int>(a, 1), arg<int>(a, 2),
                              arg<float*>(a, 3));
      break;
    case Kernel::kReluMask:
      k::bpftrain_relu_mask(arg<float*>(a, 0), arg<const float*>(a, 1), arg<u64>(a, 2));
      break;
    case Kernel::kSgdMomentum:
      k::bpftrain_sgd_momentum(arg<float*>(a, 0), arg<float*>(a, 1), arg<const float*>(a, 2),
                               arg<u64>(a, 3), arg<float>(a, 4), arg<float>(a, 5),
                               arg<float>(a, 6));
      break;
    case Kernel::kCountCorrect:
      k::bpftrain_count_correct(arg<const float*>(a, 0), arg<const int*>(a, 1), arg<int>(a, 2),
                                arg<int>(a, 3), arg<unsigned*>(a, 4));
      break;
    default:
      return cudaErrorInvalidDeviceFunction;
  }
  return cudaSuccess;
}
cublasStatus_t blasCreate(cublasHandle_t* h) {
  *h = reinterpret_cast<cublasHandle_t>(uintptr_t{1});
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t blasDestroy(cublasHandle_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t blasStream(cublasHandle_t, cudaStream_t) { return CUBLAS_STATUS_SUCCESS; }
cublasStatus_t blasMath(cublasHandle_t, cublasMath_t) { return CUBLAS_STATUS_SUCCESS; }
const char* blasStatus(cublasStatus_t) { return "emulated"; }
// cuBLAS's definition: column-major C (m x n) = alpha op(A) op(B) + beta C.
cublasStatus_t sgemm(cublasHandle_t, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                     int kk, const float* alpha, const float* A, int lda, const float* B, int ldb,
                     const float* beta, float* C, int ldc) {
  for (int j = 0; j < n; ++j)
    for (int i = 0; i < m; ++i) {
      double s = 0;
      for (int p = 0; p < kk; ++p) {
        const float a = ta == CUBLAS_OP_N ? A[i + size_t(p) * lda] : A[p + size_t(i) * lda];
        const float b = tb == CUBLAS_OP_N ? B[p + size_t(j) * ldb] : B[j + size_t(p) * ldb];
        s += double(a) * double(b);
      }
      float& c = C[i + size_t(j) * ldc];
      c = float(*alpha * s) + (*beta == 0.0f ? 0.0f : *beta * c);
    }
  return CUBLAS_STATUS_SUCCESS;
}

// NVRTC's success path, without compiling (GpuKernels above runs the real one): the "CUBIN" is
// the source, so the image cudaLibraryLoadData gets is checked to be what compileKernels made.
nvrtcResult rtcArchs(int* n) { return *n = 2, NVRTC_SUCCESS; }
nvrtcResult rtcArchList(int* a) { return a[0] = 80, a[1] = 90, NVRTC_SUCCESS; }
nvrtcResult rtcCreate(nvrtcProgram* p, const char* src, const char*, int, const char* const*,
                      const char* const*) {
  *p = reinterpret_cast<nvrtcProgram>(const_cast<char*>(src));
  return NVRTC_SUCCESS;
}
std::string rtc_options;
nvrtcResult rtcCompile(nvrtcProgram, int n, const char* const* options) {
  rtc_options.clear();
  for (int i = 0; i < n; ++i) rtc_options += std::string(options[i]) + " ";
  return NVRTC_SUCCESS;
}
nvrtcResult rtcSize(nvrtcProgram p, size_t* n) {
  *n = std::strlen(reinterpret_cast<const char*>(p));
  return NVRTC_SUCCESS;
}
nvrtcResult rtcImage(nvrtcProgram p, char* out) {
  std::memcpy(out, p, std::strlen(reinterpret_cast<const char*>(p)));
  return NVRTC_SUCCESS;
}
nvrtcResult rtcDestroy(nvrtcProgram* p) { return *p = nullptr, NVRTC_SUCCESS; }
const char* rtcError(nvrtcResult) { return "emulated"; }

// Emulated runtime, cuBLAS and NVRTC: no CUDA library is loaded.
GpuLibrary library() {
  GpuLibrary lib;
  lib.nvrtcGetErrorString = rtcError;
  lib.nvrtcGetNumSupportedArchs = rtcArchs;
  lib.nvrtcGetSupportedArchs = rtcArchList;
  lib.nvrtcCreateProgram = rtcCreate;
  lib.nvrtcCompileProgram = rtcCompile;
  lib.nvrtcGetCUBINSize = rtcSize;
  lib.nvrtcGetCUBIN = rtcImage;
  lib.nvrtcDestroyProgram = rtcDestroy;
  lib.cudaGetDeviceCount = getDeviceCount;
  lib.cudaGetDevice = getDevice;
  lib.cudaGetErrorString = errorString;
  lib.cudaDeviceGetAttribute = deviceAttribute;
  lib.cudaFree = freeHost;
  lib.cudaMemcpyAsync = memcpyAsync;
  lib.cudaMemsetAsync = memsetAsync;
  lib.cudaStreamSynchronize = synchronize;
  lib.cudaGetLastError = lastError;
  lib.cudaLibraryLoadData = libraryLoad;
  lib.cudaLibraryGetKernel = libraryKernel;
  lib.cudaLibraryUnload = libraryUnload;
  lib.cudaMalloc = mallocHost;
  lib.cudaLaunchKernel = launch;
  lib.cublasCreate_v2 = blasCreate;
  lib.cublasDestroy_v2 = blasDestroy;
  lib.cublasSetStream_v2 = blasStream;
  lib.cublasSetMathMode = blasMath;
  lib.cublasSgemm_v2 = sgemm;
  lib.cublasGetStatusString = blasStatus;
  return lib;
}

}  // namespace emu

float maxAbsDiff(std::span<const float> a, std::span<const float> b) {
  float d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

// The GPU model's math, on the CPU, against the CPU Mlp from the same He-initialised bits: per
// step the same loss and batch-mean gradient (to float rounding: the sums run in another order),
// the tail round trip, the same SGD-momentum update; after 150 steps the same accuracy.
TEST(GpuMlp, ComputesTheCpuModelsGradientsAndUpdates) {
  const GpuLibrary lib = emu::library();
  model::Split data = model::splitDataset(model::loadDigits(model::defaultDigitsPath()), 0.2, 1);
  model::ModelSpec spec;
  std::string e;
  ASSERT_TRUE(model::parseModelSpec("mlp:32x2", spec, e)) << e;  // two hidden layers: ReLU masks
  constexpr size_t kTail = 8;
  model::Mlp cpu(spec, 128, false, kTail);
  cpu.initialize(7);
  GpuMlp gpu(spec, data.train, data.test, 128, kTail, nullptr, lib);
  EXPECT_EQ(gpu.arch(), "sm_90");
  EXPECT_TRUE(emu::loaded_the_source);
  EXPECT_EQ(emu::rtc_options, "--gpu-architecture=sm_90 --fmad=false --std=c++17 ");
  ASSERT_EQ(gpu.parameterCount(), cpu.parameterCount());
  ASSERT_EQ(gpu.gradientsWithTailCount(), cpu.gradientsWithTail().size());
  gpu.upload(cpu.parameters(), cpu.momentum());
  model::Sharder sharder(data.train.rows(), 0, 1, 32, 7);
  std::vector<float> params(cpu.parameterCount()), momentum(cpu.parameterCount());
  for (uint64_t step = 0; step < 150; ++step) {
    auto batch = sharder.batchFor(step);
    const float lc = cpu.computeGradients(data.train, batch);
    const float lg = gpu.computeGradients(batch);
    if (step < 5) {
      EXPECT_NEAR(lg, lc, 1e-5f * std::max(1.0f, lc)) << "step " << step;
      std::span<const float> g(gpu.gradientsWithTail(), cpu.parameterCount());
      EXPECT_LT(maxAbsDiff(g, cpu.gradients()), 1e-5f) << "step " << step;
      const std::vector<float> tail{1, 2, 3, 4, 5, 6, 7, float(step)};
      std::vector<float> back(kTail);
      gpu.uploadTail(tail);
      gpu.downloadTail(back);
      EXPECT_EQ(back, tail);
    }
    cpu.applyGradients(0.05f, 0.9f, 1.0f);
    gpu.applyGradients(0.05f, 0.9f, 1.0f);
    if (step < 5) {
      gpu.download(params, momentum);
      EXPECT_LT(maxAbsDiff(params, cpu.parameters()), 1e-5f) << "step " << step;
      EXPECT_LT(maxAbsDiff(momentum, cpu.momentum()), 1e-5f) << "step " << step;
    }
  }
  const double acc_cpu = cpu.accuracy(data.test), acc_gpu = gpu.accuracy();
  EXPECT_GE(acc_cpu, 0.85);
  EXPECT_NEAR(acc_gpu, acc_cpu, 0.03);
  EXPECT_GT(emu::launches, 150u * 8u);
  EXPECT_THROW(gpu.computeGradients(std::vector<uint32_t>(129, 0)), std::runtime_error);
}

}  // namespace
}  // namespace bpftrain::trainer::gpu
