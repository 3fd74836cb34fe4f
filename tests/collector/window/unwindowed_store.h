// Base for SeriesStore test doubles that keep samples without sliding windows (the ingest and
// controller fakes): the window-related half of the interface answered trivially, so each
// double only writes lookup/record/snapshot and its own checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "collector/window/series_store.h"

namespace bpftrain::collector::window::testing {

class UnwindowedStore : public SeriesStore {
 public:
  size_t memoryBytes() const override { return 0; }
  const WindowConfig& config() const override { return config_; }
  int64_t stepOf(int64_t now_ns) const override { return now_ns / config_.step.count(); }
  size_t visitStep(int64_t, const std::function<void(const StepSummary&)>&) const override {
    return 0;
  }
  void mergeStep(int, SeriesId, const StepSummary&, int64_t) override {}
  uint64_t lateSamples() const override { return 0; }

 private:
  WindowConfig config_;  // the defaults: stepOf() uses its step
};

}  // namespace bpftrain::collector::window::testing
