#include "collector/app/privilege.h"

#include <grp.h>
#include <linux/capability.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace bpftrain::collector::app {
namespace {

// CAP_BPF and CAP_PERFMON are newer than some headers.
constexpr int kCapPerfmon = 38;
constexpr int kCapBpf = 39;

const char* capName(int cap) {
  switch (cap) {
    case kCapBpf:
      return "cap_bpf";
    case kCapPerfmon:
      return "cap_perfmon";
    case CAP_SYS_PTRACE:
      return "cap_sys_ptrace";
    case CAP_DAC_READ_SEARCH:
      return "cap_dac_read_search";
    default:
      return "cap_?";
  }
}

std::string errnoText(const std::string& what) { return what + ": " + std::strerror(errno); }

bool lookUp(const std::string& user, passwd& pw, std::string& buf) {
  buf.resize(16384);
  passwd* found = nullptr;
  return getpwnam_r(user.c_str(), &pw, buf.data(), buf.size(), &found) == 0 && found != nullptr;
}

}  // namespace

std::vector<int> capabilitiesForProbes() { return {kCapBpf, kCapPerfmon, CAP_SYS_PTRACE}; }

// /proc/PID/environ is mode 0400, owned by the process's user: opening another user's needs
// CAP_DAC_READ_SEARCH before the ptrace check (CAP_SYS_PTRACE) lets it be read.
std::vector<int> capabilitiesForDiscovery() { return {CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH}; }

bool userExists(const std::string& user) {
  passwd pw{};
  std::string buf;
  return lookUp(user, pw, buf);
}

bool userIds(const std::string& user, unsigned& uid, unsigned& gid) {
  passwd pw{};
  std::string buf;
  if (!lookUp(user, pw, buf)) return false;
  uid = pw.pw_uid;
  gid = pw.pw_gid;
  return true;
}

bool dropPrivileges(const std::string& user, const std::vector<int>& keep, PrivilegeDrop& out,
                    std::string& error) {
  __u32 mask[2] = {0, 0};
  // Only what this process has can be kept (a non-root collector may hold fewer).
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct now[2] = {};
  if (syscall(SYS_capget, &header, now) != 0) {
    error = errnoText("capget");
    return false;
  }
  out.kept.clear();
  for (int cap : keep) {
    if (!((now[cap / 32].permitted >> (cap % 32)) & 1u)) continue;
    mask[cap / 32] |= 1u << (cap % 32);
    out.kept += (out.kept.empty() ? "" : ",") + std::string(capName(cap));
  }
  if (out.kept.empty()) out.kept = "none";

  // The bounding set first: dropping from it needs CAP_SETPCAP, which root still has now.
  for (int cap = 0; cap <= 63; ++cap) {
    if ((mask[cap / 32] >> (cap % 32)) & 1u) continue;
    if (prctl(PR_CAPBSET_READ, cap, 0, 0, 0) == 1) prctl(PR_CAPBSET_DROP, cap, 0, 0, 0);
  }
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);

  if (!user.empty()) {
    passwd pw{};
    std::string buf;
    if (!lookUp(user, pw, buf)) {
      error = "--user " + user +
              ": no such user (create it, e.g. systemd-sysusers with "
              "bpftrain.sysusers, or pass --user root to stay root)";
      return false;
    }
    // Keep the permitted set across setuid for this thread; other threads lose everything.
    if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) != 0) {
      error = errnoText("prctl(PR_SET_KEEPCAPS)");
      return false;
    }
    if (initgroups(pw.pw_name, pw.pw_gid) != 0) {
      error = errnoText("--user " + user + ": initgroups");
      return false;
    }
    if (setresgid(pw.pw_gid, pw.pw_gid, pw.pw_gid) != 0) {
      error = errnoText("--user " + user + ": setresgid");
      return false;
    }
    if (setresuid(pw.pw_uid, pw.pw_uid, pw.pw_uid) != 0) {
      error = errnoText("--user " + user + ": setresuid");
      return false;
    }
    prctl(PR_SET_KEEPCAPS, 0, 0, 0, 0);
    out.dropped_user = true;
    out.uid = pw.pw_uid;
    out.gid = pw.pw_gid;
  }
  // Permitted and effective become exactly `keep`; nothing inheritable.
  header = {_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[2] = {};
  for (int i = 0; i < 2; ++i) data[i].permitted = data[i].effective = mask[i];
  if (syscall(SYS_capset, &header, data) != 0) {
    error = errnoText("capset(" + out.kept + ")");
    return false;
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) {
    error = errnoText("prctl(PR_SET_NO_NEW_PRIVS)");
    return false;
  }
  return true;
}

}  // namespace bpftrain::collector::app
