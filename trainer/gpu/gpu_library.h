// The CUDA runtime, cuBLAS and NVRTC functions of the GPU-resident model (gpu_mlp.h), loaded at run
// time like nccl_library.h loads NCCL: bpftrain-train links none of them, so a Gloo rank maps none
// (libcublas and libnvrtc are 100+ MiB each) and the binary starts on hosts without CUDA.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>
#include <nvrtc.h>

#include <memory>
#include <string>

namespace bpftrain::trainer::gpu {

// Every function the model calls: X(name) per function, in the library it comes from.
// cudaLibraryLoadData / cudaLibraryGetKernel / cudaLibraryUnload are the runtime's library
// management API (CUDA 12 and later; docs/trainer.md has the facts this relies on).
// clang-format off
#define BPFTRAIN_GPU_CUDART_FUNCTIONS(X) \
  X(cudaGetDeviceCount)                  \
  X(cudaGetDevice)                       \
  X(cudaGetErrorString)                  \
  X(cudaDeviceGetAttribute)              \
  X(cudaFree)                            \
  X(cudaMemcpyAsync)                     \
  X(cudaMemsetAsync)                     \
  X(cudaStreamSynchronize)               \
  X(cudaGetLastError)                    \
  X(cudaLibraryLoadData)                 \
  X(cudaLibraryGetKernel)                \
  X(cudaLibraryUnload)
#define BPFTRAIN_CUBLAS_FUNCTIONS(X) \
  X(cublasCreate_v2)                 \
  X(cublasDestroy_v2)                \
  X(cublasSetStream_v2)              \
  X(cublasSetMathMode)               \
  X(cublasSgemm_v2)                  \
  X(cublasGetStatusString)
#define BPFTRAIN_NVRTC_FUNCTIONS(X) \
  X(nvrtcVersion)                   \
  X(nvrtcGetErrorString)            \
  X(nvrtcGetNumSupportedArchs)      \
  X(nvrtcGetSupportedArchs)         \
  X(nvrtcCreateProgram)             \
  X(nvrtcCompileProgram)            \
  X(nvrtcGetProgramLogSize)         \
  X(nvrtcGetProgramLog)             \
  X(nvrtcGetPTXSize)                \
  X(nvrtcGetPTX)                    \
  X(nvrtcGetCUBINSize)              \
  X(nvrtcGetCUBIN)                  \
  X(nvrtcDestroyProgram)
// clang-format on

// The sonames of the CUDA major the headers come from (13 -> libcublas.so.13, libnvrtc.so.13).
struct GpuLibraryNames {
  std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  std::string cublas = "libcublas.so." + std::to_string(CUDART_VERSION / 1000);
  std::string nvrtc = "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000);
  // Tried when the loader's search path has no such library: where CMake found the toolkit.
  std::string dir = BPFTRAIN_CUDA_LIB_DIR;
};

struct GpuLibrary {
#define BPFTRAIN_GPU_LIBRARY_SLOT(name) decltype(&::name) name = nullptr;
  BPFTRAIN_GPU_CUDART_FUNCTIONS(BPFTRAIN_GPU_LIBRARY_SLOT)
  BPFTRAIN_CUBLAS_FUNCTIONS(BPFTRAIN_GPU_LIBRARY_SLOT)
  BPFTRAIN_NVRTC_FUNCTIONS(BPFTRAIN_GPU_LIBRARY_SLOT)
#undef BPFTRAIN_GPU_LIBRARY_SLOT
  // cuda_runtime.h adds template overloads of these two, so their C types are spelled out (a
  // static_assert in gpu_library.cc checks them against the header's).
  cudaError_t (*cudaMalloc)(void** ptr, size_t size) = nullptr;
  cudaError_t (*cudaLaunchKernel)(const void* func, dim3 grid, dim3 block, void** args,
                                  size_t shared_mem, cudaStream_t stream) = nullptr;
  std::string cudart_path, cublas_path, nvrtc_path;  // what dlopen mapped, for logs
};

// dlopen the three libraries and dlsym every function; throws std::runtime_error, one line naming
// the library or symbol and the fix.
std::unique_ptr<GpuLibrary> loadGpuLibrary(const GpuLibraryNames& names = {});

// loadGpuLibrary() once per process (thread-safe); a failure is thrown again on each call.
const GpuLibrary& gpuLibrary();

}  // namespace bpftrain::trainer::gpu
