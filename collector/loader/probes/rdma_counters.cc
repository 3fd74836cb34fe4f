// rdma_counters: the RDMA ports' own counters, read from sysfs each window step. No BPF: the
// drivers count in hardware (mlx5) or in the kernel (rxe) and publish cumulative counters per
// port, which become bpftrain_rdma_port_<name>_total{device,port} (the catalogue lists the names;
// others go to bpftrain_rdma_port_other_total{counter}). The labels are bounded by the devices
// and ports the host has. The first read of a counter is its baseline: the device counted since
// boot, not since the collector started. Down, with the fix, when the host has no RDMA port.
#include "collector/loader/probes/rdma_counters.h"

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "collector/loader/probe_module.h"

namespace bpftrain::collector::loader::probes::rdma_counters {

namespace fs = std::filesystem;

namespace {

// Files of hw_counters that are settings, not counts.
constexpr std::string_view kSettings[] = {"lifespan"};

std::vector<std::string> sortedEntries(const fs::path& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec))
    names.push_back(it->path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::optional<uint64_t> readNumber(const fs::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!in || !std::getline(in, text)) return std::nullopt;
  while (!text.empty() && (text.back() == ' ' || text.back() == '\r')) text.pop_back();
  uint64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || text.empty()) return std::nullopt;
  return value;
}

struct Named {
  std::string_view file;
  const metrics::MetricDef* metric;
};
#define BPFTRAIN_RDMA_PORT_ENTRY(X, id, file, suffix, unit, help) {file, &metrics::id},
constexpr Named kNamed[] = {BPFTRAIN_RDMA_PORT_COUNTERS(BPFTRAIN_RDMA_PORT_ENTRY, _)};
#undef BPFTRAIN_RDMA_PORT_ENTRY

}  // namespace

std::vector<PortCounter> readPortCounters(const std::string& root) {
  std::vector<PortCounter> out;
  for (const std::string& device : sortedEntries(root)) {
    const fs::path ports = fs::path(root) / device / "ports";
    for (const std::string& port : sortedEntries(ports)) {
      std::set<std::string> seen;
      for (const char* dir : {"counters", "hw_counters"}) {
        for (const std::string& file : sortedEntries(ports / port / dir)) {
          if (std::find(std::begin(kSettings), std::end(kSettings), file) != std::end(kSettings))
            continue;
          if (seen.count(file)) continue;
          // Some counters/ files exist on every device and fail to read where the driver does
          // not implement them (EINVAL): not counters of this port.
          const auto value = readNumber(ports / port / dir / file);
          if (!value) continue;
          seen.insert(file);
          out.push_back({device, port, file, *value});
        }
      }
    }
  }
  return out;
}

std::string noPorts(const std::string& root) {
  for (const std::string& device : sortedEntries(root))
    if (!sortedEntries(fs::path(root) / device / "ports").empty()) return {};
  return "no RDMA port in " + root +
         ": load the NIC's RDMA driver (mlx5_ib ...), or for soft-RoCE `modprobe rdma_rxe` and "
         "`rdma link add rxe0 type rxe netdev ETH`; the probe is checked when the collector starts";
}

const metrics::MetricDef* metricFor(std::string_view file) {
  for (const Named& named : kNamed)
    if (named.file == file) return named.metric;
  return nullptr;
}

namespace {

class Object final : public ProbeObject {
 public:
  explicit Object(std::string root) : root_(std::move(root)) {}

  // Reads every port's counters and records what each counted since the last step.
  Status consume(SampleSink& sink) override {
    for (const PortCounter& c : readPortCounters(root_)) {
      auto [it, created] = seen_.try_emplace(c.device + '/' + c.port + '/' + c.file);
      Seen& s = it->second;
      if (created) {
        if (const metrics::MetricDef* metric = metricFor(c.file)) {
          const window::Label labels[] = {{"device", c.device}, {"port", c.port}};
          s.id = sink.hostSeries(*metric, labels);
        } else {
          const window::Label labels[] = {
              {"device", c.device}, {"port", c.port}, {"counter", c.file}};
          s.id = sink.hostSeries(metrics::kRdmaPortOther, labels);
        }
        s.prev = c.value;  // the baseline: counted before we looked
        continue;
      }
      // A smaller value is a reset (driver reloaded, device re-added): a new baseline.
      if (c.value > s.prev) sink.record(s.id, static_cast<double>(c.value - s.prev));
      s.prev = c.value;
    }
    return {};
  }

 private:
  struct Seen {
    window::SeriesId id = window::kRejectedSeries;
    uint64_t prev = 0;
  };
  std::string root_;
  std::map<std::string, Seen> seen_;
};

const ProbeDef kProbes[] = {
    {"rdma_port_counters",
     {},
     "/sys/class/infiniband/*/ports/*/{counters,hw_counters} (read each step)"},
};

Result<std::unique_ptr<ProbeObject>> load(const ProbeEnv& env, LoadNotes& notes) {
  const std::string& root = env.options.rdma_sysfs_root;
  if (std::string why = noPorts(root); !why.empty()) notes.markDown(0, std::move(why));
  return std::unique_ptr<ProbeObject>(std::make_unique<Object>(root));
}

}  // namespace

BPFTRAIN_PROBE_MODULE(kProbes, load)

}  // namespace bpftrain::collector::loader::probes::rdma_counters
