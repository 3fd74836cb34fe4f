// The tgid -> slot table every BPF object reads (bpf/lib/target.bpf.h's target_tgid_slots): one
// byte per possible pid in an mmap()ed BPF array, created once here and shared into each object
// before load. A target change is a byte store into the mapping, seen by the programs at once; a
// lookup from user space is a byte load, so the table is also the loader's own record of which
// process counts under which slot.
#pragma once

#include <bpf/libbpf.h>

#include <cstdint>
#include <utility>

#include "bpf/lib/targets.h"
#include "collector/loader/bpf_handles.h"
#include "collector/loader/libbpf_check.h"

namespace bpftrain::collector::loader {

class TgidSlotTable {
 public:
  TgidSlotTable() = default;
  TgidSlotTable(TgidSlotTable&& other) noexcept
      : fd_(std::move(other.fd_)), bytes_(std::exchange(other.bytes_, nullptr)) {}
  TgidSlotTable& operator=(TgidSlotTable&& other) noexcept;
  TgidSlotTable(const TgidSlotTable&) = delete;
  TgidSlotTable& operator=(const TgidSlotTable&) = delete;
  ~TgidSlotTable();

  // 4 MiB of kernel memory (BPFTRAIN_PID_LIMIT bytes), once per collector.
  static Result<TgidSlotTable> create();
  bool valid() const { return bytes_ != nullptr; }
  // Makes the object's target_tgid_slots use this table (before load).
  Status reuseIn(bpf_map* map) const;
  // slot 1..255 (0 is --all's). only_new: fails with err() == EEXIST when tgid has a slot.
  Status insert(uint32_t tgid, uint32_t slot, bool only_new);
  // tgid's slot, 0 for none (no Status: callers ask for every process every poll).
  uint32_t slotOf(uint32_t tgid) const;
  // Clears tgid's slot when it is `slot`: several senders can share a process, and only the
  // owner's entry goes (nothing to do when tgid has another slot or none).
  Status erase(uint32_t tgid, uint32_t slot);

 private:
  UniqueFd fd_;
  uint8_t* bytes_ = nullptr;  // the map's value, mapped shared
};

}  // namespace bpftrain::collector::loader
