#include "trainer/app/nccl_library.h"

#include <stdexcept>
#include <type_traits>

#include "trainer/gpu/dynamic_library.h"

namespace bpftrain::trainer::app {
namespace {

// Fails to compile unless cuda_runtime_api.h declares exactly this C cudaMalloc.
static_assert(
    std::is_same_v<decltype(NcclLibrary::cudaMalloc),
                   decltype(static_cast<cudaError_t (*)(void**, size_t)>(&::cudaMalloc))>);

}  // namespace

std::unique_ptr<NcclLibrary> loadNcclLibrary(const NcclLibraryNames& names) {
  const std::string cudart_what =
      "the CUDA " + std::to_string(CUDART_VERSION / 1000) + " runtime (" + names.cudart + ")";
  const std::string nccl_what = "NCCL " + std::to_string(NCCL_MAJOR) + " (" + names.nccl + ")";
  // The handles are never closed (see the header): a loaded library stays for the process.
  const gpu::DynamicLibrary cudart = gpu::openLibrary(names.cudart, names.cudart_dir, cudart_what);
  const gpu::DynamicLibrary nccl = gpu::openLibrary(names.nccl, names.nccl_dir, nccl_what);
  auto lib = std::make_unique<NcclLibrary>();
#define BPFTRAIN_RESOLVE_CUDART(name) gpu::resolveInto(cudart, #name, lib->name, cudart_what);
#define BPFTRAIN_RESOLVE_NCCL(name) gpu::resolveInto(nccl, #name, lib->name, nccl_what);
  BPFTRAIN_CUDART_FUNCTIONS(BPFTRAIN_RESOLVE_CUDART)
  BPFTRAIN_RESOLVE_CUDART(cudaMalloc)
  BPFTRAIN_NCCL_FUNCTIONS(BPFTRAIN_RESOLVE_NCCL)
#undef BPFTRAIN_RESOLVE_CUDART
#undef BPFTRAIN_RESOLVE_NCCL
  lib->cudart_path = cudart.path;
  lib->nccl_path = nccl.path;
  return lib;
}

const NcclLibrary& ncclLibrary() {
  // A throwing initializer leaves the static uninitialised, so the next call tries again.
  static const std::unique_ptr<NcclLibrary> lib = loadNcclLibrary();
  return *lib;
}

}  // namespace bpftrain::trainer::app
