// The ring probe: under --adaptive, every few steps, a small allreduce on the flat ring (the
// rules ladder's home rung) at the step boundary, timed and reported as
// bpftrain_ring_probe_seconds. Its result is thrown away (the gradients never see it).
//
// Why: once the controller has climbed to hierarchical, the links that made the ring slow carry
// almost nothing it can read (hierarchical's node stage runs in shared memory, so same-host TCP
// is a few control messages whose RTT read 6-18 ms throttled or not; the leaders' inter-host
// delivery rate overlapped throttled and clear on netlab). The only way back was a re-probe: run
// the ring for a second or two and see (a failed one cost ~5% of an intra-host phase, and a
// clear link waited for the next one, 8-16 s). The probe asks the ring's links directly, at the
// price of one small collective: the controller steps back when it reads near its clear level
// and skips the re-probe while it reads far above it.
//
// Every rank decides from the step and the topology it runs at the boundary, which are the same
// on every rank there, so all of them probe at the same steps with no extra message.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/training_config.h"

namespace bpftrain::trainer::control {

// 1 MiB: the ring carries 1.5x this over each hop, several times netlab's TBF burst (256 KB),
// so a throttled hop shows its rate (500 Mbit/s lo: ~20 ms) and a clear one its latency (a few ms).
inline constexpr size_t kRingProbeFloats = 256 * 1024;
// While another topology runs: every 4 steps (1.2 s at netlab's 0.3 s hierarchical steps; a
// probe that reads clear needs clear_hold, 2 s, to step back).
inline constexpr uint64_t kRingProbeEveryOffRing = 4;
// On the ring, rarely: readings of the ring's clear level, the reference the others are judged
// against (the ring's own allreduce shows its links there).
inline constexpr uint64_t kRingProbeEveryOnRing = 16;

// Whether this step starts with a ring probe. Never for the first step (connections warm up) or
// without --adaptive (nothing reads it: static runs pay nothing).
inline bool ringProbeDue(uint64_t step, Topology running, bool adaptive) {
  if (!adaptive || step == 0) return false;
  const uint64_t every =
      running == Topology::kRing ? kRingProbeEveryOnRing : kRingProbeEveryOffRing;
  return step % every == 0;
}

}  // namespace bpftrain::trainer::control
