#include "collector/loader/host_facts.h"

#include <bpf/btf.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <memory>

namespace bpftrain::collector::loader {
namespace {

bool readUint(const std::string& path, uint64_t& value) {
  std::ifstream in(path);
  return static_cast<bool>(in >> value);
}

// First CPU of a list like "0-3,8", used as an id when the cache has no `id` file.
bool readFirstCpu(const std::string& path, uint64_t& value) { return readUint(path, value); }

struct BtfDeleter {
  void operator()(btf* b) const { btf__free(b); }
};

std::shared_ptr<btf> vmlinuxBtf() {
  static std::shared_ptr<btf> cached(btf__load_vmlinux_btf(), BtfDeleter{});
  return cached;
}

}  // namespace

CpuTopology readCpuTopology(int possible_cpus, const std::string& root) {
  namespace fs = std::filesystem;
  CpuTopology topo;
  topo.llc.assign(static_cast<size_t>(std::max(possible_cpus, 0)), 0);
  topo.node.assign(topo.llc.size(), 0);
  for (int cpu = 0; cpu < possible_cpus; ++cpu) {
    const std::string dir = root + "/cpu" + std::to_string(cpu);
    std::error_code ec;
    uint32_t node = 0;
    for (const auto& entry : fs::directory_iterator(dir, ec)) {
      const std::string name = entry.path().filename().string();
      if (name.size() > 4 && name.compare(0, 4, "node") == 0 &&
          std::all_of(name.begin() + 4, name.end(), [](char c) { return std::isdigit(c); })) {
        node = static_cast<uint32_t>(std::stoul(name.substr(4)));
        break;
      }
    }
    topo.node[cpu] = node;
    // The highest cache index with level 3 (or the highest level present) is the LLC.
    uint64_t best_level = 0, llc_id = 0;
    bool have_llc = false;
    for (int index = 0; index < 8; ++index) {
      const std::string cache = dir + "/cache/index" + std::to_string(index);
      uint64_t level = 0;
      if (!readUint(cache + "/level", level)) continue;
      if (level < best_level) continue;
      uint64_t id = 0;
      if (readUint(cache + "/id", id) || readFirstCpu(cache + "/shared_cpu_list", id)) {
        best_level = level;
        llc_id = id;
        have_llc = true;
      }
    }
    // Distinct LLCs on distinct nodes must not compare equal: fold the node into the id.
    topo.llc[cpu] =
        have_llc ? static_cast<uint32_t>(llc_id) + (node << 20) : (node << 20) | 0xfffff;
  }
  return topo;
}

uint32_t thpOrder() {
  uint64_t pmd = 0;
  if (!readUint("/sys/kernel/mm/transparent_hugepage/hpage_pmd_size", pmd) || pmd == 0) return 0;
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  uint32_t order = 0;
  while ((page << order) < pmd && order < 20) ++order;
  return order;
}

std::vector<std::string> kernelEnumNames(const char* enum_name, const char* strip_prefix,
                                         size_t max_values) {
  std::vector<std::string> names;
  auto b = vmlinuxBtf();
  if (!b) return names;
  const int id = btf__find_by_name_kind(b.get(), enum_name, BTF_KIND_ENUM);
  if (id < 0) return names;
  const btf_type* t = btf__type_by_id(b.get(), id);
  const struct btf_enum* e = btf_enum(t);
  names.resize(max_values);
  const std::string prefix = strip_prefix;
  for (int i = 0; i < btf_vlen(t); ++i) {
    std::string name = btf__name_by_offset(b.get(), e[i].name_off);
    const auto value = static_cast<uint32_t>(e[i].val);
    if (name.rfind("NR_", 0) == 0 || name.ends_with("_TYPES") || value >= max_values) continue;
    if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
    std::transform(name.begin(), name.end(), name.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    names[value] = name;
  }
  return names;
}

bool kernelHasRawTracepoint(const std::string& tracepoint) {
  auto b = vmlinuxBtf();
  if (!b) return false;
  return btf__find_by_name_kind(b.get(), ("btf_trace_" + tracepoint).c_str(), BTF_KIND_TYPEDEF) >=
         0;
}

std::vector<std::string> missingBpfCapabilities() {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  std::vector<std::string> missing;
  if (syscall(SYS_capget, &header, data) != 0) return {"CAP_BPF", "CAP_PERFMON"};
  auto has = [&](int cap) { return (data[cap / 32].effective >> (cap % 32)) & 1u; };
  constexpr int kCapPerfmon = 38, kCapBpf = 39;  // not in older <linux/capability.h>
  if (has(CAP_SYS_ADMIN)) return missing;
  if (!has(kCapBpf)) missing.push_back("CAP_BPF");
  if (!has(kCapPerfmon)) missing.push_back("CAP_PERFMON");
  return missing;
}

}  // namespace bpftrain::collector::loader
