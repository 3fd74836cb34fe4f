// A per-rank counter that modules read from /proc for each process of a slot each step instead of
// counting in BPF (faults: /proc/PID/stat's fault counts; sched_wait: the threads' schedstat
// run-queue wait). It keeps which processes each slot has, adds what each counted since the last
// step, keeps what a process that left the slot counted before it left, and forgets a process once
// it is gone. What a process is and how it is read is the module's:
//   struct Process {
//     uint32_t tgid;
//     // Opens the process's files and reads the baseline; nullopt with ok status when it is gone
//     // already, an error when /proc refuses (hidepid, a foreign mount).
//     static std::optional<Process> open(uint32_t tgid, Status& status);
//     // What it counted since the last call; nullopt once it is gone.
//     std::optional<uint64_t> advance();
//   };
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "collector/loader/probe_module.h"

namespace bpftrain::collector::loader {

template <typename Process>
class ProcCounterSlots {
 public:
  // Each step's sum is recorded into `metric` times `scale` (e.g. 1e-9 for nanoseconds).
  ProcCounterSlots(const metrics::MetricDef& metric, double scale)
      : metric_(metric), scale_(scale) {}

  // A process joins the slot (again: nothing to do); its later counts are the slot's.
  Status add(uint32_t slot, uint32_t tgid) {
    std::vector<Process>& processes = slots_[slot].processes;
    for (const Process& p : processes)
      if (p.tgid == tgid) return {};
    Status status;
    std::optional<Process> process = Process::open(tgid, status);
    if (process) processes.push_back(std::move(*process));
    return status;  // gone already: its slot goes when its sender does
  }

  // A process leaves a slot that stays: what it counted since the last step still counts.
  void remove(uint32_t slot, uint32_t tgid) {
    auto it = slots_.find(slot);
    if (it == slots_.end()) return;
    std::vector<Process>& processes = it->second.processes;
    for (auto p = processes.begin(); p != processes.end(); ++p) {
      if (p->tgid != tgid) continue;
      it->second.pending += p->advance().value_or(0);
      processes.erase(p);
      return;
    }
  }

  // Each live slot's count since the last step, into its series.
  void record(SampleSink& sink) {
    for (auto& [slot, state] : slots_) {
      if (!sink.live(slot)) continue;
      uint64_t delta = std::exchange(state.pending, 0);
      for (auto p = state.processes.begin(); p != state.processes.end();) {
        const std::optional<uint64_t> counted = p->advance();
        if (!counted) {  // gone since the last step: what it did after that step is not seen
          p = state.processes.erase(p);
          continue;
        }
        delta += *counted;
        ++p;
      }
      if (!state.id) state.id = sink.series(slot, metric_, {}, {});
      if (delta > 0) sink.record(*state.id, static_cast<double>(delta) * scale_);
    }
  }

  void release(uint32_t slot) { slots_.erase(slot); }

 private:
  struct Slot {
    std::vector<Process> processes;
    uint64_t pending = 0;  // counted by processes that left the slot since the last step
    std::optional<window::SeriesId> id;
  };
  const metrics::MetricDef& metric_;
  const double scale_;
  std::map<uint32_t, Slot> slots_;
};

}  // namespace bpftrain::collector::loader
