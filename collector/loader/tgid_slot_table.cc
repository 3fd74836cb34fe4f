#include "collector/loader/tgid_slot_table.h"

#include <bpf/bpf.h>
#include <sys/mman.h>

#include <string>

#include "collector/loader/bpf_maps.h"

namespace bpftrain::collector::loader {

namespace {

Status outOfRange(uint32_t tgid) {
  return Status::error("pid " + std::to_string(tgid) + " is above the kernel's pid limit " +
                       std::to_string(BPFTRAIN_PID_LIMIT))
      .withErrno(ERANGE);
}

}  // namespace

TgidSlotTable& TgidSlotTable::operator=(TgidSlotTable&& other) noexcept {
  if (this != &other) {
    if (bytes_) munmap(bytes_, BPFTRAIN_PID_LIMIT);
    fd_ = std::move(other.fd_);
    bytes_ = std::exchange(other.bytes_, nullptr);
  }
  return *this;
}

TgidSlotTable::~TgidSlotTable() {
  if (bytes_) munmap(bytes_, BPFTRAIN_PID_LIMIT);
}

Result<TgidSlotTable> TgidSlotTable::create() {
  LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_MMAPABLE);
  int fd = -1;
  BPFTRAIN_TRY(check("cannot create the target table bt_tgid_slots (4 MiB)", [&] {
    fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "bt_tgid_slots", sizeof(uint32_t), BPFTRAIN_PID_LIMIT,
                        1, &opts);
    return fd;
  }));
  TgidSlotTable out;
  out.fd_ = UniqueFd(fd);
  void* bytes = nullptr;
  BPFTRAIN_TRY(check("cannot map the target table bt_tgid_slots", bytes, [&] {
    void* p = mmap(nullptr, BPFTRAIN_PID_LIMIT, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    return p == MAP_FAILED ? nullptr : p;
  }));
  out.bytes_ = static_cast<uint8_t*>(bytes);
  return out;
}

Status TgidSlotTable::reuseIn(bpf_map* map) const {
  BPFTRAIN_TRY(detail::expectMap(map, BPF_MAP_TYPE_ARRAY, sizeof(uint32_t), BPFTRAIN_PID_LIMIT));
  return check(std::string("cannot share the target table with ") + bpf_map__name(map),
               [&] { return bpf_map__reuse_fd(map, fd_.get()); });
}

// Single-byte atomic stores and loads: a program reading the byte meanwhile sees the old slot or
// the new one, never a mix.
Status TgidSlotTable::insert(uint32_t tgid, uint32_t slot, bool only_new) {
  if (tgid >= BPFTRAIN_PID_LIMIT) return outOfRange(tgid);
  if (slot == BPFTRAIN_SLOT_ALL || slot >= BPFTRAIN_MAX_SLOTS)
    return Status::error("slot " + std::to_string(slot) + " cannot hold a process")
        .withErrno(EINVAL);
  if (only_new && __atomic_load_n(&bytes_[tgid], __ATOMIC_RELAXED) != 0)
    return Status::error("pid " + std::to_string(tgid) + " is already a target").withErrno(EEXIST);
  __atomic_store_n(&bytes_[tgid], static_cast<uint8_t>(slot), __ATOMIC_RELEASE);
  return {};
}

uint32_t TgidSlotTable::slotOf(uint32_t tgid) const {
  return tgid < BPFTRAIN_PID_LIMIT ? __atomic_load_n(&bytes_[tgid], __ATOMIC_RELAXED) : 0;
}

Status TgidSlotTable::erase(uint32_t tgid, uint32_t slot) {
  if (tgid >= BPFTRAIN_PID_LIMIT) return outOfRange(tgid);
  uint8_t expected = static_cast<uint8_t>(slot);
  if (slot < BPFTRAIN_MAX_SLOTS)
    __atomic_compare_exchange_n(&bytes_[tgid], &expected, uint8_t{0}, false, __ATOMIC_RELEASE,
                                __ATOMIC_RELAXED);
  return {};
}

}  // namespace bpftrain::collector::loader
