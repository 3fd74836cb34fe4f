#include "trainer/app/nccl_environment.h"

#include <sys/stat.h>

#include <array>
#include <utility>

namespace bpftrain::trainer::app {
namespace {

constexpr std::array<std::pair<std::string_view, std::string_view>, 6> kAlgorithms = {{
    {"ring", "Ring"},
    {"tree", "Tree"},
    {"collnet_direct", "CollnetDirect"},
    {"collnet_chain", "CollnetChain"},
    {"nvls", "NVLS"},
    {"nvls_tree", "NVLSTree"},
}};

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = char(c - 'A' + 'a');
  return out;
}

const std::string* lookup(const std::map<std::string, std::string>& env, const std::string& name) {
  auto it = env.find(name);
  return it == env.end() || it->second.empty() ? nullptr : &it->second;
}

}  // namespace

bool isNcclAlgorithm(std::string_view name) { return !ncclAlgoValue(name).empty(); }

std::string ncclAlgoValue(std::string_view name) {
  for (const auto& [ours, nccl] : kAlgorithms)
    if (name == ours) return "AllReduce:" + std::string(nccl);
  return "";
}

NcclEnvironment ncclEnvironment(const Options& o, const std::map<std::string, std::string>& env,
                                const PluginSearch& plugin) {
  NcclEnvironment out;
  if (o.backend != "nccl") return out;
  if (!o.nccl_algo.empty()) {
    const std::string value = ncclAlgoValue(o.nccl_algo);
    if (const std::string* theirs = lookup(env, "NCCL_ALGO")) {
      // Theirs agrees when it names the same algorithm, for allreduce or for everything.
      const std::string plain = value.substr(value.find(':') + 1);
      if (lower(*theirs) != lower(value) && lower(*theirs) != lower(plain)) {
        out.error = "--topology " + o.nccl_algo + " asks NCCL_ALGO=" + value +
                    " but the environment has NCCL_ALGO=" + *theirs +
                    ": unset NCCL_ALGO or drop --topology";
        return out;
      }
      out.kept.push_back("NCCL_ALGO=" + *theirs);
    } else {
      out.set.push_back({"NCCL_ALGO", value});
    }
  }
  if (!o.adaptive) return out;
  auto setUnlessTheirs = [&](const std::string& name, const std::string& value) {
    if (const std::string* theirs = lookup(env, name))
      out.kept.push_back(name + "=" + *theirs);
    else
      out.set.push_back({name, value});
  };
  const bool theirs_both = lookup(env, "NCCL_TUNER_PLUGIN") && lookup(env, "NCCL_PROFILER_PLUGIN");
  if (plugin.found.empty() && !theirs_both) {
    std::string where;
    for (const std::string& c : plugin.looked_in) where += (where.empty() ? "" : ", ") + c;
    out.error =
        "--adaptive with --backend nccl loads the project's NCCL plugin, and libnccl-bpftrain.so "
        "is not in " +
        (where.empty() ? std::string("any known place") : where) +
        ": build the nccl-bpftrain target (or install it), or set NCCL_TUNER_PLUGIN and "
        "NCCL_PROFILER_PLUGIN to its path";
    return out;
  }
  setUnlessTheirs("NCCL_TUNER_PLUGIN", plugin.found);
  setUnlessTheirs("NCCL_PROFILER_PLUGIN", plugin.found);
  setUnlessTheirs("BPFTRAIN_COLLECTOR", o.collector == "none" ? "off" : o.collector);
  setUnlessTheirs("BPFTRAIN_JOB", o.job);
  setUnlessTheirs("BPFTRAIN_SECRET_FILE", o.secret_file);
  return out;
}

bool bpftrainProfilerReports(const std::map<std::string, std::string>& env) {
  const auto plugin = env.find("NCCL_PROFILER_PLUGIN");
  if (plugin == env.end()) return false;
  const auto collector = env.find("BPFTRAIN_COLLECTOR");
  if (collector != env.end() && collector->second == "off") return false;
  const std::string_view v = plugin->second;
  const std::string_view file = v.substr(v.find_last_of('/') + 1);  // npos + 1 == 0
  return v == "bpftrain" || file.starts_with("libnccl-bpftrain.so") ||
         file.starts_with("libnccl-profiler-bpftrain.so");
}

PluginSearch findNcclPlugin(const std::vector<std::string>& candidates) {
  PluginSearch s;
  for (const std::string& c : candidates) {
    if (c.empty()) continue;
    s.looked_in.push_back(c);
    struct stat st {};
    if (s.found.empty() && stat(c.c_str(), &st) == 0 && S_ISREG(st.st_mode)) s.found = c;
  }
  return s;
}

PluginSearch findNcclPlugin() {
  return findNcclPlugin({BPFTRAIN_NCCL_PLUGIN_BUILD_PATH, BPFTRAIN_NCCL_PLUGIN_INSTALL_PATH});
}

}  // namespace bpftrain::trainer::app
