// --backend nccl: the Communicator interface over NCCL on the rank's GPU (host buffers staged
// through one device buffer). Built only with BPFTRAIN_WITH_NCCL; CUDA and NCCL are loaded at
// run time (nccl_library.h). Without them, or on a host without a GPU, it fails at start with a
// message saying so.
#pragma once

#include <memory>

#include "trainer/collective/communicator.h"

namespace bpftrain::trainer::app {

// Rendezvous through a directory store: rank 0 publishes the NCCL unique id there.
// Throws std::runtime_error naming the fix (libraries missing, no GPU, redis store, timeout).
std::unique_ptr<collective::Communicator> createNcclCommunicator(
    const collective::CommOptions& options);

}  // namespace bpftrain::trainer::app
