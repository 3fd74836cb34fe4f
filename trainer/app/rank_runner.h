// One training rank: data, model, communicator, pinning, telemetry, control, checkpoints.
#pragma once

#include "trainer/app/options.h"

namespace bpftrain::trainer::app {

// Trains to --steps and returns the process exit code (errors are printed as one line).
int runRank(const Options& options);

}  // namespace bpftrain::trainer::app
