#include "trainer/gpu/gpu_library.h"

#include <type_traits>

#include "trainer/gpu/dynamic_library.h"

namespace bpftrain::trainer::gpu {
namespace {

// Fail to compile unless cuda_runtime_api.h declares exactly these C functions.
static_assert(
    std::is_same_v<decltype(GpuLibrary::cudaMalloc),
                   decltype(static_cast<cudaError_t (*)(void**, size_t)>(&::cudaMalloc))>);
static_assert(
    std::is_same_v<decltype(GpuLibrary::cudaLaunchKernel),
                   decltype(static_cast<cudaError_t (*)(const void*, dim3, dim3, void**, size_t,
                                                        cudaStream_t)>(&::cudaLaunchKernel))>);

}  // namespace

std::unique_ptr<GpuLibrary> loadGpuLibrary(const GpuLibraryNames& names) {
  const std::string major = std::to_string(CUDART_VERSION / 1000);
  const std::string cudart_what = "the CUDA " + major + " runtime (" + names.cudart + ")";
  const std::string cublas_what = "cuBLAS " + major + " (" + names.cublas + ")";
  const std::string nvrtc_what = "NVRTC " + major + " (" + names.nvrtc + ")";
  const DynamicLibrary cudart = openLibrary(names.cudart, names.dir, cudart_what);
  const DynamicLibrary cublas = openLibrary(names.cublas, names.dir, cublas_what);
  const DynamicLibrary nvrtc = openLibrary(names.nvrtc, names.dir, nvrtc_what);
  auto lib = std::make_unique<GpuLibrary>();
#define BPFTRAIN_RESOLVE_CUDART(name) resolveInto(cudart, #name, lib->name, cudart_what);
#define BPFTRAIN_RESOLVE_CUBLAS(name) resolveInto(cublas, #name, lib->name, cublas_what);
#define BPFTRAIN_RESOLVE_NVRTC(name) resolveInto(nvrtc, #name, lib->name, nvrtc_what);
  BPFTRAIN_GPU_CUDART_FUNCTIONS(BPFTRAIN_RESOLVE_CUDART)
  BPFTRAIN_RESOLVE_CUDART(cudaMalloc)
  BPFTRAIN_RESOLVE_CUDART(cudaLaunchKernel)
  BPFTRAIN_CUBLAS_FUNCTIONS(BPFTRAIN_RESOLVE_CUBLAS)
  BPFTRAIN_NVRTC_FUNCTIONS(BPFTRAIN_RESOLVE_NVRTC)
#undef BPFTRAIN_RESOLVE_CUDART
#undef BPFTRAIN_RESOLVE_CUBLAS
#undef BPFTRAIN_RESOLVE_NVRTC
  lib->cudart_path = cudart.path;
  lib->cublas_path = cublas.path;
  lib->nvrtc_path = nvrtc.path;
  return lib;
}

const GpuLibrary& gpuLibrary() {
  // A throwing initializer leaves the static uninitialised, so the next call tries again.
  static const std::unique_ptr<GpuLibrary> lib = loadGpuLibrary();
  return *lib;
}

}  // namespace bpftrain::trainer::gpu
