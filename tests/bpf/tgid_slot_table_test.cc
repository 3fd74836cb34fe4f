// The tgid -> slot table (collector/loader/tgid_slot_table.h): what user space writes through its
// mapping is what the map holds for BPF, slots are one byte with 0 meaning none, and pids past the
// kernel's limit are refused. Creating the map needs root (CAP_BPF); label bpf.
#include "collector/loader/tgid_slot_table.h"

#include <bpf/bpf.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <string_view>
#include <vector>

#include "tests/support/requirements.h"

namespace bpftrain::collector::loader {
namespace {

TgidSlotTable createTable() {
  auto table = TgidSlotTable::create();
  if (!table.ok()) ADD_FAILURE() << table.status().message();
  return table.ok() ? table.take() : TgidSlotTable();
}

TEST(TgidSlotTableTest, WritesThroughTheMappingAreWhatTheMapHolds) {
  BPFTRAIN_REQUIRE_ROOT("creates a BPF map");
  TgidSlotTable table = createTable();
  ASSERT_TRUE(table.valid());
  EXPECT_EQ(table.slotOf(4242), 0u);
  ASSERT_TRUE(table.insert(4242, 7, /*only_new=*/true).ok());
  ASSERT_TRUE(table.insert(BPFTRAIN_PID_LIMIT - 1, 255, /*only_new=*/true).ok());
  EXPECT_EQ(table.slotOf(4242), 7u);
  EXPECT_EQ(table.slotOf(BPFTRAIN_PID_LIMIT - 1), 255u);

  // The map as a BPF program reads it: the whole value through the syscall, not the mapping.
  // A shared fd is the only way in from a test, so read through a second handle on the map.
  uint32_t id = 0;
  int fd = -1;
  while (bpf_map_get_next_id(id, &id) == 0) {
    const int candidate = bpf_map_get_fd_by_id(id);
    if (candidate < 0) continue;
    bpf_map_info info{};
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(candidate, &info, &len) == 0 &&
        std::string_view(info.name) == "bt_tgid_slots" && info.value_size == BPFTRAIN_PID_LIMIT) {
      std::vector<uint8_t> value(BPFTRAIN_PID_LIMIT);
      const uint32_t key = 0;
      if (bpf_map_lookup_elem(candidate, &key, value.data()) == 0 && value[4242] == 7 &&
          value[BPFTRAIN_PID_LIMIT - 1] == 255) {
        fd = candidate;
        break;
      }
    }
    close(candidate);
  }
  ASSERT_GE(fd, 0) << "no bt_tgid_slots map holds what was written through the mapping";
  close(fd);

  // A process announced twice counts under its first slot.
  const Status again = table.insert(4242, 9, /*only_new=*/true);
  EXPECT_EQ(again.err(), EEXIST) << again.message();
  EXPECT_EQ(table.slotOf(4242), 7u);
  ASSERT_TRUE(table.insert(4242, 9, /*only_new=*/false).ok());
  EXPECT_EQ(table.slotOf(4242), 9u);

  // Only the owning slot's entry goes.
  ASSERT_TRUE(table.erase(4242, 7).ok());
  EXPECT_EQ(table.slotOf(4242), 9u);
  ASSERT_TRUE(table.erase(4242, 9).ok());
  EXPECT_EQ(table.slotOf(4242), 0u);
  EXPECT_TRUE(table.erase(4242, 9).ok()) << "erasing a pid with no slot is no error";
}

TEST(TgidSlotTableTest, RefusesWhatTheTableCannotHold) {
  BPFTRAIN_REQUIRE_ROOT("creates a BPF map");
  TgidSlotTable table = createTable();
  ASSERT_TRUE(table.valid());
  EXPECT_EQ(table.insert(BPFTRAIN_PID_LIMIT, 1, false).err(), ERANGE);
  EXPECT_EQ(table.slotOf(BPFTRAIN_PID_LIMIT), 0u);
  EXPECT_EQ(table.erase(BPFTRAIN_PID_LIMIT, 1).err(), ERANGE);
  // Slot 0 is --all's, and a slot must fit its byte.
  EXPECT_EQ(table.insert(1, BPFTRAIN_SLOT_ALL, false).err(), EINVAL);
  EXPECT_EQ(table.insert(1, BPFTRAIN_MAX_SLOTS, false).err(), EINVAL);
  EXPECT_EQ(table.slotOf(1), 0u);
}

}  // namespace
}  // namespace bpftrain::collector::loader
