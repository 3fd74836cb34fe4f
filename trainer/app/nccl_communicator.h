// --backend nccl: the Communicator interface over NCCL on the rank's GPU (host buffers staged
// through one device buffer). Built only with BPFTRAIN_WITH_NCCL; CUDA and NCCL are loaded at
// run time (nccl_library.h). Without them, or on a host without a GPU, it fails at start with a
// message saying so.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>

#include "trainer/collective/communicator.h"

namespace bpftrain::trainer::app {

// The Communicator calls stage host buffers; the GPU model (trainer/gpu/gpu_mlp.h) sums its
// device gradient buffer in place instead, on the communicator's stream.
class NcclCommunicator : public collective::Communicator {
 public:
  // ncclAllReduce(sum) of `count` floats at `device`, in place, enqueued on stream().
  virtual void allreduceDevice(float* device, size_t count) = 0;
  virtual cudaStream_t stream() const = 0;
};

// Rendezvous through a directory store: rank 0 publishes the NCCL unique id there.
// Throws std::runtime_error naming the fix (libraries missing, no GPU, redis store, timeout).
std::unique_ptr<NcclCommunicator> createNcclCommunicator(const collective::CommOptions& options);

}  // namespace bpftrain::trainer::app
