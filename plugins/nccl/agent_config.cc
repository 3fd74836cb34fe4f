#include "plugins/nccl/agent_config.h"

#include <unistd.h>

#include <charconv>
#include <cstdlib>
#include <string_view>

#include "common/wire_format.h"
#include "plugins/nccl/profiler.h"

namespace bpftrain::nccl_plugin {
namespace {

const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : nullptr;
}

bool parseInt(std::string_view s, int64_t& out) {
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || v < 0) return false;
  out = v;
  return true;
}

// The first of `names` that is set and a number.
int64_t firstNumber(std::initializer_list<const char*> names, int64_t fallback) {
  for (const char* n : names) {
    int64_t v = 0;
    if (const char* s = env(n); s != nullptr && parseInt(s, v)) return v;
  }
  return fallback;
}

// A hostname as a wire name: a letter or _ first, then letters, digits, _ - .
std::string nodeName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  std::string s(buf);
  if (s.size() > wire::kMaxNameLength) s.resize(wire::kMaxNameLength);
  for (char& c : s) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-' || c == '.';
    if (!ok) c = '_';
  }
  if (!wire::isValidName(s)) s[0] = '_';
  return s;
}

}  // namespace

AgentConfig AgentConfig::fromEnvironment() {
  AgentConfig c;
  if (const char* v = env("BPFTRAIN_COLLECTOR")) c.collector = v;
  if (const char* v = env("BPFTRAIN_JOB")) {
    if (wire::isValidName(v) && std::string_view(v).size() <= wire::kMaxNameLength)
      c.job = v;
    else
      c.warnings.push_back(std::string("BPFTRAIN_JOB=") + v +
                           " is not a job name (a letter or _, then letters, digits, _ - .); "
                           "using job nccl");
  }
  c.node = nodeName();
  c.rank = firstNumber({"RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID", "PMI_RANK"}, -1);
  c.world = firstNumber({"WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "SLURM_NTASKS", "PMI_SIZE"}, 0);
  if (const char* v = env("BPFTRAIN_SECRET_FILE")) c.secret_file = v;
  int64_t ms = 0;
  if (const char* v = env("BPFTRAIN_NCCL_FLUSH_MS")) {
    if (parseInt(v, ms) && ms >= 10 && ms <= 10'000)
      c.flush_ns = uint64_t(ms) * 1'000'000;
    else
      c.warnings.push_back(std::string("BPFTRAIN_NCCL_FLUSH_MS=") + v +
                           " is not 10..10000; using 200");
  }
  c.event_mask = ProfilerCore::kDefaultMask;
  if (const char* v = env("BPFTRAIN_NCCL_EVENTS")) {
    int mask = 0;
    std::string_view rest(v);
    while (!rest.empty()) {
      size_t comma = rest.find(',');
      std::string_view item = rest.substr(0, comma);
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      if (item == "coll") {
        mask |= abi::ncclProfileColl;
      } else if (item == "kernel") {
        mask |= abi::ncclProfileColl | abi::ncclProfileKernelCh;
      } else if (item == "proxy") {
        mask |= abi::ncclProfileProxyOp | abi::ncclProfileProxyStep;
      } else if (item == "none") {
      } else {
        c.warnings.push_back("BPFTRAIN_NCCL_EVENTS: unknown item '" + std::string(item) +
                             "' (coll, kernel, proxy, none); using all");
        mask = ProfilerCore::kDefaultMask;
        break;
      }
    }
    c.event_mask = mask;
  }
  return c;
}

}  // namespace bpftrain::nccl_plugin
