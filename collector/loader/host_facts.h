// What the probes need to know about this host before load, read from sysfs/procfs/BTF.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bpftrain::collector::loader {

struct CpuTopology {
  // Indexed by CPU number (possible CPUs). An id is only compared for equality.
  std::vector<uint32_t> llc;
  std::vector<uint32_t> node;
};

// CPU -> last-level-cache id and CPU -> NUMA node from /sys/devices/system/cpu. A CPU whose cache
// topology is not exposed gets its node's id as LLC id (so it never counts as cross-LLC).
CpuTopology readCpuTopology(int possible_cpus,
                            const std::string& sysfs_cpu_root = "/sys/devices/system/cpu");

// log2(PMD huge page size / page size); 9 on x86-64. 0 when THP is not configured.
uint32_t thpOrder();

// Names of an enum in the running kernel's BTF, indexed by value (empty where no enumerator),
// the common prefix stripped and lowercased: TLB_REMOTE_SHOOTDOWN -> "remote_shootdown".
// Sentinel enumerators (NR_*, *_TYPES) are left out. Empty vector when BTF lacks the enum.
std::vector<std::string> kernelEnumNames(const char* enum_name, const char* strip_prefix,
                                         size_t max_values);

// True when the running kernel's BTF has the tp_btf target btf_trace_<tracepoint>.
bool kernelHasRawTracepoint(const std::string& tracepoint);

// The capabilities BPF tracing needs that this process lacks ("CAP_BPF", "CAP_PERFMON");
// CAP_SYS_ADMIN covers both.
std::vector<std::string> missingBpfCapabilities();

}  // namespace bpftrain::collector::loader
