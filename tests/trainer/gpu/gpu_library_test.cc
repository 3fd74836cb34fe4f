// The GPU model's loader and kernels against the CUDA installed where the build found it, no GPU
// needed: every function resolves and answers through its pointer, a missing library is one line
// naming the fix, and NVRTC compiles every kernel (a syntax error in kernels.cc fails here, not
// first on a GPU machine).
#include "trainer/gpu/gpu_library.h"

#include <gtest/gtest.h>

#include <cstring>
#include <stdexcept>
#include <string>

#include "trainer/gpu/kernels.h"

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
// one (the CUBIN the trainer loads), here an H100/H200's sm_90.
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

TEST(GpuKernels, TheArchitectureIsTheNewestNotNewerThanTheDevice) {
  const GpuLibrary& lib = gpuLibrary();
  EXPECT_EQ(archForDevice(lib, 9, 0), "sm_90");
  EXPECT_EQ(archForDevice(lib, 8, 6), "sm_86");
  // A device newer than this NVRTC knows gets the newest CUBIN this NVRTC can write.
  const std::string future = archForDevice(lib, 99, 9);
  EXPECT_TRUE(future.starts_with("sm_")) << future;
  EXPECT_THROW(archForDevice(lib, 1, 0), std::runtime_error);
}

}  // namespace
}  // namespace bpftrain::trainer::gpu
