#include "collector/loader/rdma_source.h"

#include <dirent.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <memory>
#include <set>

namespace bpftrain::collector::loader {

std::string rxeKprobesUnavailable() {
  static constexpr const char* kFunctions[] = {"rxe_post_send", "do_complete", "rxe_cq_post"};
  if (!std::ifstream("/sys/bus/event_source/devices/kprobe/type") &&
      !std::ifstream("/sys/kernel/tracing/kprobe_events"))
    return "this kernel has no kprobes (no /sys/bus/event_source/devices/kprobe, no "
           "/sys/kernel/tracing/kprobe_events): work requests only from rdma_verbs (Gloo) and "
           "rdma_usdt";
  // kallsyms names the module's functions once rdma_rxe is loaded ("... t
  // rxe_cq_post\t[rdma_rxe]").
  std::set<std::string> found;
  std::ifstream kallsyms("/proc/kallsyms");
  for (std::string line; std::getline(kallsyms, line);) {
    if (line.find("[rdma_rxe]") == std::string::npos) continue;
    for (const char* f : kFunctions) {
      const std::string name = std::string(" ") + f + "\t";
      if (line.find(name) != std::string::npos) found.insert(f);
    }
  }
  if (found.empty())
    return "the soft-RoCE module rdma_rxe is not loaded (no rxe_post_send in /proc/kallsyms): "
           "modprobe rdma_rxe and add a device (rdma link add rxe0 type rxe netdev IF) before the "
           "collector starts; real NICs are seen by rdma_verbs and rdma_port_counters";
  for (const char* f : kFunctions)
    if (!found.count(f))
      return std::string("rdma_rxe has no function ") + f +
             " in this kernel (inlined or renamed; bpf/rdma_rxe.bpf.c names the 6.1 ones)";
  return {};
}

std::vector<std::string> verbsDevicesOf(const std::string& proc_root, uint32_t tgid,
                                        const std::string& verbs_class) {
  static constexpr std::string_view kUverbs = "/dev/infiniband/uverbs";
  std::set<std::string> devices;
  const std::string fds = proc_root + "/" + std::to_string(tgid) + "/fd";
  std::unique_ptr<DIR, int (*)(DIR*)> dir(::opendir(fds.c_str()), ::closedir);
  if (!dir) return {};
  while (const dirent* entry = ::readdir(dir.get())) {
    if (entry->d_name[0] == '.') continue;
    char target[PATH_MAX];
    const ssize_t n = ::readlink((fds + "/" + entry->d_name).c_str(), target, sizeof target - 1);
    if (n <= 0) continue;
    const std::string_view link(target, size_t(n));
    if (link.substr(0, kUverbs.size()) != kUverbs) continue;
    std::ifstream ibdev(verbs_class + "/" + std::string(link.substr(link.rfind('/') + 1)) +
                        "/ibdev");
    std::string device;
    if (std::getline(ibdev, device) && !device.empty()) devices.insert(device);
  }
  return {devices.begin(), devices.end()};
}

bool isSoftRoce(const std::string& infiniband_class, const std::string& device) {
  const std::string path = infiniband_class + "/" + device;
  if (!std::ifstream(path + "/parent")) return false;
  char real[PATH_MAX];
  if (!::realpath(path.c_str(), real)) return false;
  return std::string_view(real).find("/devices/virtual/") != std::string_view::npos;
}

std::string_view name(RdmaSourceChoice choice) {
  switch (choice) {
    case RdmaSourceChoice::kUndecided:
      return "undecided";
    case RdmaSourceChoice::kKernel:
      return "rxe";
    case RdmaSourceChoice::kUprobes:
      return "gloo";
  }
  return "?";
}

RdmaSourceChoice chooseRdmaSource(std::span<const std::string> devices, bool kernel_sees_rxe,
                                  const std::function<bool(const std::string&)>& is_soft_roce) {
  // Without the kernel side nothing is to be chosen: the uprobes from the start, as before the
  // choice existed (no device to wait for, and no post can come before they are attached).
  if (!kernel_sees_rxe) return RdmaSourceChoice::kUprobes;
  if (devices.empty()) return RdmaSourceChoice::kUndecided;
  const bool all_seen = std::all_of(devices.begin(), devices.end(), is_soft_roce);
  return all_seen ? RdmaSourceChoice::kKernel : RdmaSourceChoice::kUprobes;
}

}  // namespace bpftrain::collector::loader
