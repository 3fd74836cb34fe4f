// Typed access to BPF maps, so that business code never handles a raw fd or a value size: each
// wrapper checks the map's type and sizes once when it is bound, and every operation returns a
// Status from the libbpf check (libbpf_check.h).
//   PerCpuArray<T>   a skeleton's BPF_MAP_TYPE_PERCPU_ARRAY of T (the `lost` map)
//   PerCpuCounters   a skeleton's per-slot counter block: `counts`, whose value is a struct of u64
//                    (per-CPU, or one shared copy updated with atomic adds)
//   HashMap<K, V>    a map the loader creates and shares across objects (the cgroup targets)
//   RingReader<S>    a BPF_MAP_TYPE_RINGBUF of records S, each delivered to handler->onSample(s)
#pragma once

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "collector/loader/bpf_handles.h"
#include "collector/loader/libbpf_check.h"

namespace bpftrain::collector::loader {

namespace detail {

inline Status expectMap(const bpf_map* map, bpf_map_type type, size_t key_size, size_t value_size,
                        SourceLocation where = SourceLocation::current()) {
  if (!map) return Status::error("BPF map missing from the object", where);
  const std::string name = bpf_map__name(map);
  if (bpf_map__type(map) != type)
    return Status::error("BPF map " + name + " has type " + std::to_string(bpf_map__type(map)) +
                             ", the loader expects " + std::to_string(type),
                         where);
  if (bpf_map__key_size(map) != key_size || bpf_map__value_size(map) != value_size)
    return Status::error("BPF map " + name + " has key/value size " +
                             std::to_string(bpf_map__key_size(map)) + "/" +
                             std::to_string(bpf_map__value_size(map)) + ", the loader expects " +
                             std::to_string(key_size) + "/" + std::to_string(value_size),
                         where);
  return {};
}

// A per-CPU array of fixed-size values; reads hand back one value per possible CPU.
class PerCpuCore {
 public:
  PerCpuCore() = default;
  PerCpuCore(const bpf_map* map, size_t value_size, int ncpus)
      : map_(map),
        value_size_(value_size),
        ncpus_(ncpus),
        reading_(std::string("reading BPF map ") + bpf_map__name(map)),
        writing_(std::string("writing BPF map ") + bpf_map__name(map)) {}
  bool bound() const { return map_ != nullptr; }
  Status read(uint32_t index, void* per_cpu, size_t bytes) const {
    return check(reading_, [&] {
      return bpf_map__lookup_elem(map_, &index, sizeof(index), per_cpu, bytes, 0);
    });
  }
  Status write(uint32_t index, const void* per_cpu, size_t bytes) const {
    return check(writing_, [&] {
      return bpf_map__update_elem(map_, &index, sizeof(index), per_cpu, bytes, BPF_ANY);
    });
  }
  size_t valueSize() const { return value_size_; }
  int ncpus() const { return ncpus_; }

 private:
  const bpf_map* map_ = nullptr;
  size_t value_size_ = 0;
  int ncpus_ = 0;
  std::string reading_, writing_;  // the check's "what", built once
};

}  // namespace detail

template <typename T>
class PerCpuArray {
  static_assert(std::is_trivially_copyable_v<T> && sizeof(T) % 8 == 0,
                "per-CPU values are laid out 8-byte aligned; use u64 fields");

 public:
  PerCpuArray() = default;
  static Result<PerCpuArray> bind(const bpf_map* map, int ncpus) {
    BPFTRAIN_TRY(detail::expectMap(map, BPF_MAP_TYPE_PERCPU_ARRAY, sizeof(uint32_t), sizeof(T)));
    PerCpuArray out;
    out.core_ = detail::PerCpuCore(map, sizeof(T), ncpus);
    return out;
  }
  bool bound() const { return core_.bound(); }
  // per_cpu gets one value per possible CPU.
  Status read(uint32_t index, std::vector<T>& per_cpu) const {
    per_cpu.resize(static_cast<size_t>(core_.ncpus()));
    return core_.read(index, per_cpu.data(), per_cpu.size() * sizeof(T));
  }

 private:
  detail::PerCpuCore core_;
};

// The per-slot counter block of an object: PERCPU_ARRAY[BPFTRAIN_MAX_SLOTS] of a struct made of
// u64 words only (the module's <stem>_counts). The loader sums word i over CPUs. An object may
// declare it a plain ARRAY instead (BPFTRAIN_SHARED_COUNTS_MAP, atomic adds), read as one CPU:
// before Linux 6.10 a per-CPU array lookup is a helper call, an array's is inlined.
class PerCpuCounters {
 public:
  PerCpuCounters() = default;
  template <typename Counts>
  static Result<PerCpuCounters> bind(const bpf_map* map, int ncpus) {
    static_assert(std::is_trivially_copyable_v<Counts> && sizeof(Counts) % sizeof(uint64_t) == 0,
                  "a counter struct is u64 words only");
    const bool shared = map && bpf_map__type(map) == BPF_MAP_TYPE_ARRAY;
    BPFTRAIN_TRY(detail::expectMap(map, shared ? BPF_MAP_TYPE_ARRAY : BPF_MAP_TYPE_PERCPU_ARRAY,
                                   sizeof(uint32_t), sizeof(Counts)));
    PerCpuCounters out;
    out.core_ = detail::PerCpuCore(map, sizeof(Counts), shared ? 1 : ncpus);
    return out;
  }
  bool bound() const { return core_.bound(); }
  size_t words() const { return core_.valueSize() / sizeof(uint64_t); }
  // totals[i] = word i of slot, summed over CPUs. scratch is reused across calls.
  Status sum(uint32_t slot, std::span<uint64_t> totals, std::vector<uint64_t>& scratch) const {
    const size_t n = words();
    scratch.resize(static_cast<size_t>(core_.ncpus()) * n);
    BPFTRAIN_TRY(core_.read(slot, scratch.data(), scratch.size() * sizeof(uint64_t)));
    for (size_t i = 0; i < n && i < totals.size(); ++i) {
      uint64_t total = 0;
      for (int cpu = 0; cpu < core_.ncpus(); ++cpu) total += scratch[cpu * n + i];
      totals[i] = total;
    }
    return {};
  }
  // Zeroes a slot on every CPU (its next owner starts from nothing).
  Status zero(uint32_t slot) const {
    std::vector<uint64_t> zeros(static_cast<size_t>(core_.ncpus()) * words(), 0);
    return core_.write(slot, zeros.data(), zeros.size() * sizeof(uint64_t));
  }

 private:
  detail::PerCpuCore core_;
};

// A hash map the loader owns (created here, shared into objects with reuseIn()).
template <typename K, typename V>
class HashMap {
 public:
  HashMap() = default;
  static Result<HashMap> create(const char* name, uint32_t max_entries) {
    int fd = -1;
    BPFTRAIN_TRY(check(std::string("cannot create the target map ") + name, [&] {
      fd = bpf_map_create(BPF_MAP_TYPE_HASH, name, sizeof(K), sizeof(V), max_entries, nullptr);
      return fd;
    }));
    HashMap out;
    out.fd_ = UniqueFd(fd);
    return out;
  }
  bool valid() const { return fd_.valid(); }
  // Makes the object's map of the same name use this one (before load).
  Status reuseIn(bpf_map* map) const {
    BPFTRAIN_TRY(detail::expectMap(map, BPF_MAP_TYPE_HASH, sizeof(K), sizeof(V)));
    return check(std::string("cannot share the target map with ") + bpf_map__name(map),
                 [&] { return bpf_map__reuse_fd(map, fd_.get()); });
  }
  // only_new: fails with err() == EEXIST when the key is present.
  Status insert(const K& key, const V& value, bool only_new) {
    return check("updating the target map", [&] {
      return bpf_map_update_elem(fd_.get(), &key, &value, only_new ? BPF_NOEXIST : BPF_ANY);
    });
  }
  // err() == ENOENT when the key is absent.
  Status lookup(const K& key, V& value) const {
    return check("reading the target map",
                 [&] { return bpf_map_lookup_elem(fd_.get(), &key, &value); });
  }
  // err() == ENOENT when the key is absent.
  Status erase(const K& key) {
    return check("deleting from the target map",
                 [&] { return bpf_map_delete_elem(fd_.get(), &key); });
  }

 private:
  UniqueFd fd_;
};

// A ring buffer of fixed-size records, each delivered to handler->onSample(const Sample&) on
// consume().
template <typename Sample>
class RingReader {
  static_assert(std::is_trivially_copyable_v<Sample>);

 public:
  RingReader() = default;
  // handler must outlive the reader (a module hands itself or a member).
  template <typename Handler>
  static Result<RingReader> open(const bpf_map* map, Handler* handler) {
    if (!map) return Status::error("ring buffer map missing from the object");
    if (bpf_map__type(map) != BPF_MAP_TYPE_RINGBUF)
      return Status::error(std::string("BPF map ") + bpf_map__name(map) + " is not a ring buffer");
    ring_buffer* rb = nullptr;
    BPFTRAIN_TRY(check(std::string("cannot open ring buffer ") + bpf_map__name(map), rb, [&] {
      return ring_buffer__new(bpf_map__fd(map), &onRecord<Handler>, handler, nullptr);
    }));
    RingReader out;
    out.ring_.reset(rb);
    return out;
  }
  bool bound() const { return ring_ != nullptr; }
  // Delivers every record available now; never waits.
  Status consume() {
    return check("consuming the ring buffer", [&] { return ring_buffer__consume(ring_.get()); });
  }

 private:
  template <typename Handler>
  static int onRecord(void* ctx, void* data, size_t size) {
    if (size < sizeof(Sample)) return 0;  // the shared header is the contract; never read past it
    Sample sample;
    std::memcpy(&sample, data, sizeof(sample));
    static_cast<Handler*>(ctx)->onSample(sample);
    return 0;
  }
  RingBufferPtr ring_;
};

}  // namespace bpftrain::collector::loader
