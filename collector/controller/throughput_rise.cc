#include "collector/controller/throughput_rise.h"

#include "collector/controller/figures.h"

namespace bpftrain::collector::controller {

void ThroughputRise::restart(int64_t now_ns) {
  mark_ns_ = now_ns;
  sum_ = 0;
  n_ = 0;
  rise_steps_ = 0;
}

bool ThroughputRise::update(double samples_per_s, int64_t now_ns, double latest_samples_per_s) {
  latest_ = 0;
  if (mark_ns_ < 0 || samples_per_s <= 0 || now_ns - mark_ns_ < config_.settle.count()) {
    rise_steps_ = 0;
    return false;
  }
  last_ = samples_per_s;
  const double mean = level();
  if (n_ < config_.min_readings || samples_per_s < config_.factor * mean) {
    rise_steps_ = 0;
    sum_ += samples_per_s;
    ++n_;
    return false;
  }
  ++rise_steps_;
  if (latest_samples_per_s >= config_.factor * mean) latest_ = latest_samples_per_s;
  return rise_steps_ >= config_.steps || latest_ > 0;
}

std::string ThroughputRise::why(const char* since) const {
  const double mean = level();
  return figures("samples/s rose to %.0f, %.2fx its %.0f ", last_, mean > 0 ? last_ / mean : 0,
                 mean) +
         since +
         (latest_ > 0 ? figures(", the latest step at %.0f", latest_)
                      : figures(", for %.0f steps", double(rise_steps_)));
}

}  // namespace bpftrain::collector::controller
