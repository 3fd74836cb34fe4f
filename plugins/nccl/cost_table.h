// Applying a decision to NCCL's cost table, the only lever a tuner plugin has over the algorithm
// and protocol. The table is NCCL's float[7][3] passed as float**: it is indexed flat,
// t[a*numProto + p] (indexing it as t[a][p] dereferences a float as a pointer). NCCL then takes
// the first strictly smallest entry >= 0, so the chosen entry is set to 0 and any other 0 entry
// (which could come first) is excluded with -1. An unsupported entry (< 0) is never raised.
#pragma once

#include <cstdint>

namespace bpftrain::nccl_plugin {

enum class CostEdit : uint8_t {
  kApplied,      // the chosen entry now wins NCCL's scan
  kUnsupported,  // the chosen (algorithm, protocol) is unsupported here: table untouched
  kNoChoice,     // the decision leaves the choice to NCCL (algorithm kAny)
};

// protocol kAny: the cheapest protocol the algorithm supports.
CostEdit applyToCostTable(float* table, int num_algo, int num_proto, uint8_t algorithm,
                          uint8_t protocol);

}  // namespace bpftrain::nccl_plugin
