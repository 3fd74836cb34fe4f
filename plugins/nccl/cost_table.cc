#include "plugins/nccl/cost_table.h"

#include "plugins/nccl/decision_board.h"

namespace bpftrain::nccl_plugin {

CostEdit applyToCostTable(float* table, int num_algo, int num_proto, uint8_t algorithm,
                          uint8_t protocol) {
  if (algorithm == kAny) return CostEdit::kNoChoice;
  if (table == nullptr || algorithm >= num_algo || (protocol != kAny && protocol >= num_proto))
    return CostEdit::kUnsupported;
  int p = protocol;
  if (protocol == kAny) {
    p = -1;
    for (int q = 0; q < num_proto; ++q) {
      float v = table[algorithm * num_proto + q];
      if (v >= 0 && (p < 0 || v < table[algorithm * num_proto + p])) p = q;
    }
    if (p < 0) return CostEdit::kUnsupported;
  }
  const int chosen = algorithm * num_proto + p;
  if (!(table[chosen] >= 0)) return CostEdit::kUnsupported;
  for (int i = 0; i < num_algo * num_proto; ++i)
    if (i != chosen && table[i] == 0.0f) table[i] = -1.0f;
  table[chosen] = 0.0f;
  return CostEdit::kApplied;
}

}  // namespace bpftrain::nccl_plugin
