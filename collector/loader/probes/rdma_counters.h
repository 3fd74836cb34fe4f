// What rdma_counters reads: every cumulative counter of every RDMA port in sysfs
// (/sys/class/infiniband/DEV/ports/N/{counters,hw_counters}/NAME), and which catalogue metric each
// file name becomes. Declared here so that the reader is tested against a fixture tree.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/metric_catalogue.h"

namespace bpftrain::collector::loader::probes::rdma_counters {

struct PortCounter {
  std::string device;  // e.g. mlx5_0, rxe0
  std::string port;    // e.g. 1
  std::string file;    // the counter's file name, e.g. out_of_buffer
  uint64_t value = 0;
};

// Every counter under `root` (normally /sys/class/infiniband), devices and ports in name order,
// counters/ before hw_counters/. Settings (rxe's and mlx5's `lifespan`, the hw_counters cache
// time) and files that do not read as one unsigned number are left out; a name in both
// directories is kept once, from counters/.
std::vector<PortCounter> readPortCounters(const std::string& root);

// Why `root` has no port to read (one line naming the fix), or "" when it has one.
std::string noPorts(const std::string& root);

// The catalogue metric of a counter file; nullptr for a name the catalogue does not list (it is
// exported under bpftrain_rdma_port_other{counter}).
const metrics::MetricDef* metricFor(std::string_view file);

}  // namespace bpftrain::collector::loader::probes::rdma_counters
