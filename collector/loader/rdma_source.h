// Which source counts a process's RDMA work requests (--rdma-sources). rdma_rxe's kernel probes
// (fentry, else kprobes) see every work request of any verbs program on soft-RoCE for the price
// of a trampoline or a kprobe; rdma_verbs'
// uprobes on Gloo's ibverbs pair cost a trap each (tens of microseconds under TCG, microseconds on
// hardware) and are the only source on a real NIC, whose posts never enter the kernel. `auto`
// instruments a work request once: a process whose every open verbs device is one the kernel
// side sees gets no uprobes; a process with any other device gets them. `all` attaches every
// source that can see a process (both on rxe), which the tests use to set one against the other.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace bpftrain::collector::loader {

enum class RdmaSources : uint8_t { kAuto, kAll };

// Why rdma_rxe's kprobes cannot attach on this machine, or "" when they can (kprobes exist and the
// rdma_rxe module is loaded with its three functions traceable). Reads /sys and /proc/kallsyms.
std::string rxeKprobesUnavailable();

// The RDMA devices a process has open, by name (rxe0, mlx5_0): its /proc/PID/fd links to
// /dev/infiniband/uverbsN, each mapped to a device through
// <verbs_class>/uverbsN/ibdev (verbs_class: /sys/class/infiniband_verbs). Sorted, unique;
// empty when it has none open (yet) or is gone.
std::vector<std::string> verbsDevicesOf(const std::string& proc_root, uint32_t tgid,
                                        const std::string& verbs_class);

// True for a soft-RoCE (rdma_rxe) device: rxe gives its devices a `parent` attribute (the
// netdev) and no hardware parent, so they live under /sys/devices/virtual/infiniband.
bool isSoftRoce(const std::string& infiniband_class, const std::string& device);

enum class RdmaSourceChoice : uint8_t {
  kUndecided,  // rdma_rxe is up and no verbs device is open yet (none can have been posted to)
  kKernel,     // every open device is soft-RoCE and rdma_rxe is up: no uprobes
  kUprobes,    // some device the kernel side cannot see (a real NIC), or no rdma_rxe at all
};
std::string_view name(RdmaSourceChoice choice);

// The choice for a process under `auto` from its open devices (pure).
RdmaSourceChoice chooseRdmaSource(std::span<const std::string> devices, bool kernel_sees_rxe,
                                  const std::function<bool(const std::string&)>& is_soft_roce);

}  // namespace bpftrain::collector::loader
