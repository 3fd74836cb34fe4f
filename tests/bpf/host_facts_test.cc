// What the loader reads about the host before load: CPU->LLC/node tables from a sysfs tree (a
// fake one here, so the classification is checked on a 2-node, 2-LLC layout this VM lacks) and
// enum names from the kernel's BTF. No root needed.
#include "collector/loader/host_facts.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "tests/support/requirements.h"

namespace bpftrain::collector::loader {
namespace {

namespace fs = std::filesystem;

class FakeSysfs {
 public:
  FakeSysfs() {
    root_ = fs::temp_directory_path() / ("bpftrain-sysfs-" + std::to_string(getpid()));
    fs::create_directories(root_);
  }
  ~FakeSysfs() { fs::remove_all(root_); }
  // cpu N on `node` with an L3 of id `llc` (or no cache directory when llc < 0).
  void cpu(int n, int node, int llc) {
    const fs::path dir = root_ / ("cpu" + std::to_string(n));
    fs::create_directories(dir / ("node" + std::to_string(node)));
    if (llc < 0) return;
    write(dir / "cache/index0", "1", "0");  // an L1, ignored
    write(dir / "cache/index3", "3", std::to_string(llc));
  }
  std::string path() const { return root_.string(); }

 private:
  static void write(const fs::path& index, const std::string& level, const std::string& id) {
    fs::create_directories(index);
    std::ofstream(index / "level") << level << "\n";
    std::ofstream(index / "id") << id << "\n";
  }
  fs::path root_;
};

TEST(HostFactsTest, CpuTopologyFromSysfs) {
  FakeSysfs sysfs;
  sysfs.cpu(0, 0, 0);
  sysfs.cpu(1, 0, 0);
  sysfs.cpu(2, 0, 1);
  sysfs.cpu(3, 1, 0);  // same L3 id on another node is another cache
  sysfs.cpu(4, 1, -1);
  const CpuTopology t = readCpuTopology(5, sysfs.path());
  ASSERT_EQ(t.llc.size(), 5u);
  EXPECT_EQ(t.node[0], 0u);
  EXPECT_EQ(t.node[3], 1u);
  EXPECT_EQ(t.llc[0], t.llc[1]);
  EXPECT_NE(t.llc[0], t.llc[2]);
  EXPECT_NE(t.llc[0], t.llc[3]);
  EXPECT_EQ(t.node[4], 1u);
  EXPECT_NE(t.llc[4], t.llc[3]);  // unknown cache: never equal to a real one
}

TEST(HostFactsTest, EnumNamesComeFromKernelBtf) {
  if (access("/sys/kernel/btf/vmlinux", R_OK) != 0)
    BPFTRAIN_SKIP_OR_FAIL_UNDER_CI("kernel without BTF");
  const auto tlb = kernelEnumNames("tlb_flush_reason", "TLB_", 8);
  ASSERT_EQ(tlb.size(), 8u);
  EXPECT_EQ(tlb[0], "flush_on_task_switch");
  EXPECT_EQ(tlb[1], "remote_shootdown");
  const auto migrate = kernelEnumNames("migrate_reason", "MR_", 16);
  ASSERT_EQ(migrate.size(), 16u);
  EXPECT_EQ(migrate[0], "compaction");
  bool numa = false;
  for (const auto& name : migrate) numa |= name == "numa_misplaced";
  EXPECT_TRUE(numa);
  for (const auto& name : migrate) EXPECT_NE(name, "types");  // MR_TYPES is a count, not a reason
  EXPECT_TRUE(kernelEnumNames("no_such_enum_in_any_kernel", "X_", 4).empty());
  EXPECT_TRUE(kernelHasRawTracepoint("sched_migrate_task"));
  EXPECT_FALSE(kernelHasRawTracepoint("no_such_tracepoint"));
}

}  // namespace
}  // namespace bpftrain::collector::loader
