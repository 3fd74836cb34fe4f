#include "plugins/nccl/tuner.h"

#include "plugins/nccl/cost_table.h"

namespace bpftrain::nccl_plugin {

TunerContext* Tuner::open(uint64_t comm_id, size_t nranks, size_t nnodes) {
  for (TunerContext& c : contexts_) {
    bool expected = false;
    if (c.in_use.load(std::memory_order_relaxed) ||
        !c.in_use.compare_exchange_strong(expected, true, std::memory_order_acq_rel))
      continue;
    c.comm_id = comm_id;
    c.nranks = nranks;
    c.nnodes = nnodes;
    c.calls.store(0, std::memory_order_relaxed);
    c.epoch.store(0, std::memory_order_relaxed);
    c.late.store(0, std::memory_order_relaxed);
    c.unsupported.store(0, std::memory_order_relaxed);
    c.seen_version = ~uint64_t(0);
    c.newest_epoch = 0;
    c.has_pending = c.has_active = false;
    // Fields above are published to the flusher by this release store.
    c.in_use.store(true, std::memory_order_release);
    return &c;
  }
  refused_.fetch_add(1, std::memory_order_relaxed);
  return &overflow_;
}

void Tuner::close(TunerContext* ctx) {
  if (ctx == nullptr || ctx == &overflow_) return;
  ctx->in_use.store(false, std::memory_order_release);
}

void Tuner::getCollInfo(TunerContext* ctx, int coll_type, float* table, int num_algo, int num_proto,
                        int* n_channels) {
  if (ctx == nullptr || ctx == &overflow_) return;
  const uint64_t call = ctx->calls.load(std::memory_order_relaxed);
  ctx->calls.store(call + 1, std::memory_order_relaxed);

  const uint64_t version = board_.version();
  if (version != ctx->seen_version) {
    Decision d;
    DecisionBoard::Read r = board_.find(ctx->comm_id, d);
    if (r != DecisionBoard::Read::kTorn) {
      ctx->seen_version = version;
      if (r == DecisionBoard::Read::kFound && d.epoch > ctx->newest_epoch) {
        ctx->newest_epoch = d.epoch;
        if (d.start_call < call) {
          ctx->late.fetch_add(1, std::memory_order_relaxed);
          late_.fetch_add(1, std::memory_order_relaxed);
        } else {
          ctx->pending = d;
          ctx->has_pending = true;
        }
      }
    }
  }
  if (ctx->has_pending && call >= ctx->pending.start_call) {
    ctx->active = ctx->pending;
    ctx->has_active = true;
    ctx->has_pending = false;
    ctx->epoch.store(ctx->active.epoch, std::memory_order_relaxed);
  }
  if (!ctx->has_active) return;
  const Decision& a = ctx->active;
  if (a.collective != kAny && a.collective != coll_type) return;
  if (num_algo <= 0 || num_proto <= 0 || num_algo > 16 || num_proto > 16) return;
  switch (applyToCostTable(table, num_algo, num_proto, a.algorithm, a.protocol)) {
    case CostEdit::kApplied:
      if (a.channels > 0 && n_channels != nullptr) *n_channels = a.channels;
      break;
    case CostEdit::kUnsupported:
      ctx->unsupported.fetch_add(1, std::memory_order_relaxed);
      unsupported_.fetch_add(1, std::memory_order_relaxed);
      break;
    case CostEdit::kNoChoice:
      break;
  }
}

}  // namespace bpftrain::nccl_plugin
