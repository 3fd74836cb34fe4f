#include "trainer/gpu/kernels.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

namespace bpftrain::trainer::gpu {

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
