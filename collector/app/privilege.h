// Least privilege after start-up: once the sockets are bound, the BPF programs loaded and
// attached and the log files open, the collector gives up root and every capability except
// those the running collector still uses (docs/architecture.md, "Privilege drop"):
//   CAP_BPF         map reads each step (kernels before 6.5 gate every bpf() call on it when
//                   kernel.unprivileged_bpf_disabled is set, Debian's default);
//   CAP_PERFMON     late attach: USDT uprobes on ranks that start after the collector;
//   CAP_SYS_PTRACE  /proc/PID/exe and /proc/PID/maps of ranks run by other users (that attach).
// With no probe up it keeps none. Only the thread that calls this keeps them; the others (ingest,
// /metrics) end with none, since setuid() clears a thread's capabilities unless it kept them.
#pragma once

#include <string>
#include <vector>

namespace bpftrain::collector::app {

// Capability numbers (linux/capability.h) kept when the BPF probes are up.
std::vector<int> capabilitiesForProbes();
// Kept with --discover: reading the environment of ranks that run as another user.
std::vector<int> capabilitiesForDiscovery();

struct PrivilegeDrop {
  bool dropped_user = false;  // setuid/setgid happened
  unsigned uid = 0, gid = 0;
  std::string kept;  // e.g. "cap_bpf,cap_perfmon,cap_sys_ptrace" or "none"
};

// As root: switches to `user` (its uid, gid and supplementary groups) keeping `keep`; as another
// user: reduces its capabilities to `keep`. Either way clears the ambient and bounding sets of
// everything else and sets no_new_privs. `user` empty: stays the same user. False with `error`
// naming the fix (an unknown user, a failed set*id).
bool dropPrivileges(const std::string& user, const std::vector<int>& keep, PrivilegeDrop& out,
                    std::string& error);

// Whether a user of this name exists (the default --user, bpftrain, may not).
bool userExists(const std::string& user);
// Its uid and primary gid; false when there is no such user.
bool userIds(const std::string& user, unsigned& uid, unsigned& gid);

}  // namespace bpftrain::collector::app
