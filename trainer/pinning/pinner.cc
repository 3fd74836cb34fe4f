#include "trainer/pinning/pinner.h"

#include <dirent.h>
#include <hwloc.h>
#include <linux/mempolicy.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <utility>

#include "trainer/pinning/copied_pages.h"

namespace bpftrain::trainer::pinning {

struct Pinner::Impl {
  hwloc_topology_t topo = nullptr;
  ~Impl() {
    if (topo != nullptr) hwloc_topology_destroy(topo);
  }
};

Pinner::Pinner(int local_rank, int local_world)
    : impl_(std::make_unique<Impl>()),
      local_rank_(std::max(local_rank, 0)),
      local_world_(std::max(local_world, 1)) {
  if (hwloc_topology_init(&impl_->topo) != 0 || hwloc_topology_load(impl_->topo) != 0)
    throw std::runtime_error("hwloc cannot read this machine's topology (is /sys mounted?)");
  hwloc_const_cpuset_t allowed = hwloc_topology_get_allowed_cpuset(impl_->topo);
  int n = hwloc_get_nbobjs_by_type(impl_->topo, HWLOC_OBJ_PU);
  for (int i = 0; i < n; ++i) {
    hwloc_obj_t pu = hwloc_get_obj_by_type(impl_->topo, HWLOC_OBJ_PU, unsigned(i));
    if (hwloc_bitmap_isset(allowed, pu->os_index)) pus_.push_back(int(pu->os_index));
  }
  if (pus_.empty()) throw std::runtime_error("hwloc found no allowed CPU");
  numa_nodes_ = std::max(1, hwloc_get_nbobjs_by_type(impl_->topo, HWLOC_OBJ_NUMANODE));
}

Pinner::~Pinner() = default;

PinPlan Pinner::plan(PinMode mode) const {
  PinPlan p;
  const int n = int(pus_.size());
  const int N = local_world_;
  const int r = local_rank_;
  switch (mode) {
    case PinMode::kNone:
      p.compute_cpus = pus_;
      p.comm_cpus = pus_;
      break;
    case PinMode::kCompact: {
      int start = int(int64_t(r) * n / N) % n;
      int len = std::max(1, n / N);
      // Cut the slice to the LLC (or, lacking one, the package) of its first PU.
      hwloc_obj_t first = hwloc_get_pu_obj_by_os_index(impl_->topo, unsigned(pus_[size_t(start)]));
      hwloc_obj_t cache = first;
      while (cache != nullptr && cache->type != HWLOC_OBJ_L3CACHE &&
             cache->type != HWLOC_OBJ_PACKAGE && cache->parent != nullptr)
        cache = cache->parent;
      for (int i = start; i < std::min(n, start + len); ++i) {
        if (cache != nullptr && !hwloc_bitmap_isset(cache->cpuset, unsigned(pus_[size_t(i)])))
          break;
        p.compute_cpus.push_back(pus_[size_t(i)]);
      }
      p.comm_cpus = p.compute_cpus;
      break;
    }
    case PinMode::kSpread: {
      std::vector<int> own;
      if (N <= n) {
        for (int i = r; i < n; i += N) own.push_back(pus_[size_t(i)]);
      } else {
        own.push_back(pus_[size_t(r % n)]);
      }
      p.compute_cpus = {own.front()};
      if (own.size() > 1) {
        p.comm_cpus.assign(own.begin() + 1, own.end());
      } else {
        p.comm_cpus = p.compute_cpus;
      }
      break;
    }
    case PinMode::kNuma: {
      int node_index = int(int64_t(r) * numa_nodes_ / N);
      hwloc_obj_t node =
          hwloc_get_obj_by_type(impl_->topo, HWLOC_OBJ_NUMANODE, unsigned(node_index));
      if (node == nullptr) {
        p.compute_cpus = pus_;
      } else {
        p.numa_node = int(node->os_index);
        for (int cpu : pus_)
          if (hwloc_bitmap_isset(node->cpuset, unsigned(cpu))) p.compute_cpus.push_back(cpu);
      }
      p.comm_cpus = p.compute_cpus;
      break;
    }
  }
  std::sort(p.compute_cpus.begin(), p.compute_cpus.end());
  std::sort(p.comm_cpus.begin(), p.comm_cpus.end());
  return p;
}

namespace {

bool bindThread(pid_t tid, const std::vector<int>& cpus, std::string& error) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : cpus) CPU_SET(c, &set);
  if (sched_setaffinity(tid, sizeof(set), &set) == 0 || errno == ESRCH) return true;
  error = "cannot pin thread " + std::to_string(tid) + ": " + std::strerror(errno);
  return false;
}

}  // namespace

bool Pinner::apply(PinMode mode, std::span<const pid_t> compute, std::span<const pid_t> comm,
                   std::span<const MemoryRegion> regions, std::string& error) {
  PinPlan p = plan(mode);
  for (pid_t t : compute)
    if (!bindThread(t, p.compute_cpus, error)) return false;
  for (pid_t t : comm)
    if (!bindThread(t, p.comm_cpus, error)) return false;
  hwloc_bitmap_t nodeset = hwloc_bitmap_alloc();
  hwloc_membind_policy_t policy = HWLOC_MEMBIND_DEFAULT;
  if (p.numa_node >= 0) {
    hwloc_bitmap_only(nodeset, unsigned(p.numa_node));
    policy = HWLOC_MEMBIND_BIND;
  } else {
    hwloc_bitmap_copy(nodeset, hwloc_topology_get_complete_nodeset(impl_->topo));
  }
  // Before the regions' own binding, which then overrides this on them.
  if (p.numa_node >= 0 || anon_node_ >= 0) placeAnonymousMemory(p.numa_node);
  bool ok = true;
  for (const MemoryRegion& region : regions) {
    if (region.bytes == 0) continue;
    // MIGRATE moves pages already touched, so a switch to numa brings the buffers along.
    // STRICT: without it hwloc asks for MPOL_PREFERRED_MANY, which lets pages fall elsewhere.
    int flags = HWLOC_MEMBIND_BYNODESET |
                (policy == HWLOC_MEMBIND_BIND ? HWLOC_MEMBIND_MIGRATE | HWLOC_MEMBIND_STRICT : 0);
    if (hwloc_set_area_membind(impl_->topo, region.address, region.bytes, nodeset, policy, flags) !=
        0) {
      error = std::string("cannot bind model memory to NUMA node: ") + std::strerror(errno);
      ok = false;
      break;
    }
  }
  hwloc_bitmap_free(nodeset);
  if (ok) setThreadPolicy(p.numa_node);
  return ok;
}

// The bound regions are the model's buffers only; the heap, the dataset, Gloo's buffers and the
// stacks keep the default (local) policy and stay wherever the rank ran before it was pinned:
// measured in numalab, 64-99% of a numa-pinned rank's anonymous pages were on its node
// (docs/numalab.md). So on the move into numa every anonymous mapping of the process
// (/proc/self/maps: no file behind it) prefers the node, and its pages move there (mbind
// MPOL_MF_MOVE: pages this process alone maps). Only anonymous memory: migrate_pages(2) on the
// whole process also moved the file pages of its libraries (218 MiB of libnccl in numalab), a
// 12 s step. Preferred, not bind: a full node spills over rather than failing an allocation.
// Leaving numa gives those mappings the default policy back; their pages stay. In numa mode it
// runs again at every re-pin (new threads): a thread that allocated before it was pinned left
// pages on the node it ran on (94% of a rank's pages on its node in one CI run where this ran
// only on the move into numa; pages already on the node are not touched again).
void Pinner::placeAnonymousMemory(int node) {
  constexpr int kMaxNodes = NodeMask::kMaxNodes;
  if (node >= kMaxNodes) return;
  NodeMask mask;
  if (node >= 0) mask.set(node);
  last_migrate_error_ = 0;
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) {
    last_migrate_error_ = errno;
    return;
  }
  // Read it all first: mbind splits and merges mappings, which would shift a file read in pieces.
  std::vector<std::pair<uintptr_t, uintptr_t>> anon;
  std::vector<AddressRange> copied;  // private, not executable file mappings: data and RELRO
  char line[512];
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    unsigned long start = 0, end = 0, inode = 0;
    char perms[8] = {}, path[256] = {};
    if (std::sscanf(line, "%lx-%lx %7s %*s %*s %lu %255s", &start, &end, perms, &inode, path) < 4)
      continue;
    const std::string_view where = path;
    const bool anonymous =
        inode == 0 && (where.empty() || where == "[heap]" || where.rfind("[stack", 0) == 0 ||
                       where.rfind("[anon:", 0) == 0);
    if (anonymous && perms[0] == 'r' && perms[1] == 'w') anon.emplace_back(start, end);
    if (!anonymous && inode != 0 && perms[0] == 'r' && perms[2] != 'x' && perms[3] == 'p')
      copied.push_back({start, end});
  }
  std::fclose(maps);
  for (const auto& [start, end] : anon) {
    const int mode = node >= 0 ? MPOL_PREFERRED : MPOL_DEFAULT;
    const unsigned flags = node >= 0 ? MPOL_MF_MOVE : 0;
    if (syscall(SYS_mbind, start, end - start, mode, node >= 0 ? mask.bits : nullptr,
                node >= 0 ? kMaxNodes : 0, flags) != 0 &&
        errno != EFAULT && errno != ENOMEM)  // unmapped meanwhile
      last_migrate_error_ = errno;
  }
  // The libraries' copied pages (their data and RELRO sections, relocated by the loader before
  // the rank was pinned): about 245 pages per rank, 6% of its anonymous memory, stayed on the
  // node the rank started on in two of six numalab runs until these moved too.
  if (node >= 0) {
    long moved = 0;
    const int error = moveCopiedFilePages(copied, node, moved);
    if (error != 0 && error != ENOENT && last_migrate_error_ == 0) last_migrate_error_ = error;
  }
  anon_node_ = node;
}

// The calling thread (the rank's main thread: it allocates the heap and the dataset) prefers the
// node in numa mode, whatever policy it started with (a job run under `numactl --membind` of
// another node would otherwise keep allocating there); leaving numa restores that first policy.
// Preferred, not bind: a full node spills over instead of failing an allocation mid-training.
void Pinner::setThreadPolicy(int node) {
  constexpr int kMaxNodes = NodeMask::kMaxNodes;
  if (!saved_policy_) {
    SavedPolicy saved;
    if (syscall(SYS_get_mempolicy, &saved.mode, saved.nodes.bits, kMaxNodes, nullptr, 0) != 0)
      return;
    saved_policy_ = saved;
  }
  if (node >= 0 && node < kMaxNodes) {
    NodeMask mask;
    mask.set(node);
    if (syscall(SYS_set_mempolicy, MPOL_PREFERRED, mask.bits, kMaxNodes) == 0)
      thread_policy_set_ = true;
  } else if (thread_policy_set_) {
    const SavedPolicy& s = *saved_policy_;
    // MPOL_DEFAULT takes no node mask.
    if (syscall(SYS_set_mempolicy, s.mode,
                (s.mode & ~MPOL_MODE_FLAGS) == MPOL_DEFAULT ? nullptr : s.nodes.bits,
                kMaxNodes) == 0)
      thread_policy_set_ = false;
  }
}

std::vector<pid_t> listThreads() {
  std::vector<pid_t> tids;
  DIR* d = opendir("/proc/self/task");
  if (d == nullptr) return tids;
  while (dirent* e = readdir(d)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    tids.push_back(pid_t(std::atoi(e->d_name)));
  }
  closedir(d);
  std::sort(tids.begin(), tids.end());
  return tids;
}

std::vector<int> affinityOf(pid_t tid) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> cpus;
  if (sched_getaffinity(tid, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace bpftrain::trainer::pinning
