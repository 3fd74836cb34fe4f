// The GPU model's element-wise kernels (gpu_mlp.h): CUDA C++ source compiled at run time with
// NVRTC, so the build needs no nvcc and CI's build time does not grow. The math is the CPU Mlp's
// (trainer/model/mlp.cc), written out kernel by kernel.
#pragma once

#include <array>
#include <string>

#include "trainer/gpu/gpu_library.h"

namespace bpftrain::trainer::gpu {

// The source of every kernel (kernels.cuh), one translation unit.
extern const char* const kKernelSource;

// The kernels gpu_mlp.cc looks up by name (extern "C": no mangling), in kernelIndex order.
enum class Kernel {
  kGatherRows,
  kBiasAct,
  kSoftmaxXent,
  kMeanLoss,
  kColumnSums,
  kReluMask,
  kSgdMomentum,
  kCountCorrect,
  kCount
};
inline constexpr std::array<const char*, size_t(Kernel::kCount)> kKernelNames = {
    "bpftrain_gather_rows",  "bpftrain_bias_act",     "bpftrain_softmax_xent",
    "bpftrain_mean_loss",    "bpftrain_column_sums",  "bpftrain_relu_mask",
    "bpftrain_sgd_momentum", "bpftrain_count_correct"};

// Compiles kKernelSource for `arch`: "sm_NN" gives a CUBIN (no driver JIT, so an older driver's PTX
// ISA limit does not matter), "compute_NN" gives PTX. Needs no GPU. Throws std::runtime_error
// with NVRTC's log, newlines folded, on a compile error.
std::string compileKernels(const GpuLibrary& lib, const std::string& arch);

// "sm_NN" for a device of compute capability major.minor: the newest architecture this NVRTC
// supports that is not newer than the device's.
std::string archForDevice(const GpuLibrary& lib, int major, int minor);

}  // namespace bpftrain::trainer::gpu
