// The CUDA runtime and NCCL, loaded at run time for --backend nccl. bpftrain-train does not link
// them: every run (Gloo included) would map libnccl's 218 MiB, the binary could not start on a
// host without CUDA, and the numalab initramfs would carry it. The headers still give the types.
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <memory>
#include <string>

namespace bpftrain::trainer::app {

// Every function the NCCL backend calls: X(name) per function, in the library it comes from.
// (clang-format 14 reflows these lists differently on every pass: kept as written.)
// clang-format off
#define BPFTRAIN_CUDART_FUNCTIONS(X) \
  X(cudaGetDeviceCount)              \
  X(cudaGetErrorString)              \
  X(cudaSetDevice)                   \
  X(cudaStreamCreate)                \
  X(cudaFree)                        \
  X(cudaStreamDestroy)               \
  X(cudaMemcpyAsync)                 \
  X(cudaStreamSynchronize)
#define BPFTRAIN_NCCL_FUNCTIONS(X) \
  X(ncclGetVersion)                \
  X(ncclGetErrorString)            \
  X(ncclGetUniqueId)               \
  X(ncclCommInitRank)              \
  X(ncclCommDestroy)               \
  X(ncclAllReduce)                 \
  X(ncclBroadcast)
// clang-format on

// The sonames of the majors the headers were built with (CUDA 13 -> libcudart.so.13, NCCL 2 ->
// libnccl.so.2); the ABI of these functions is stable within a major.
struct NcclLibraryNames {
  std::string cudart = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  std::string nccl = "libnccl.so." + std::to_string(NCCL_MAJOR);
  // Tried with the soname when the dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache)
  // has no such library: where CMake found them, as the build tree's RUNPATH used to say.
  std::string cudart_dir = BPFTRAIN_CUDART_LIB_DIR;
  std::string nccl_dir = BPFTRAIN_NCCL_LIB_DIR;
};

// Typed pointers, one per function, with the headers' own signatures.
struct NcclLibrary {
#define BPFTRAIN_NCCL_LIBRARY_SLOT(name) decltype(&::name) name = nullptr;
  BPFTRAIN_CUDART_FUNCTIONS(BPFTRAIN_NCCL_LIBRARY_SLOT)
  BPFTRAIN_NCCL_FUNCTIONS(BPFTRAIN_NCCL_LIBRARY_SLOT)
#undef BPFTRAIN_NCCL_LIBRARY_SLOT
  // cuda_runtime.h adds template overloads of cudaMalloc, so its type is spelled out; the cast
  // in nccl_library.cc fails to compile if the header's C signature differs.
  cudaError_t (*cudaMalloc)(void** ptr, size_t size) = nullptr;
  std::string cudart_path, nccl_path;  // what dlopen was given, for logs
};

// dlopen (RTLD_NOW | RTLD_LOCAL) both libraries and dlsym every function. Never unloaded: NCCL's
// threads and CUDA's exit handlers outlive any communicator. Throws std::runtime_error, one line
// naming the library or symbol and the fix (install it, LD_LIBRARY_PATH, or --backend gloo).
std::unique_ptr<NcclLibrary> loadNcclLibrary(const NcclLibraryNames& names = {});

// loadNcclLibrary() once per process (thread-safe); a failure is thrown again on each call.
const NcclLibrary& ncclLibrary();

}  // namespace bpftrain::trainer::app
