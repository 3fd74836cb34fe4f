#include "trainer/pinning/pinner.h"

#include <dirent.h>
#include <hwloc.h>
#include <sched.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <stdexcept>

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
  return ok;
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
