// --rdma-sources auto's choice per process (collector/loader/rdma_source): a fixture /proc (fd
// links to /dev/infiniband/uverbsN) and sysfs (infiniband_verbs/uverbsN/ibdev; an rxe device
// under devices/virtual with its `parent`, an mlx5 one under a PCI device), then the pure choice.
#include "collector/loader/rdma_source.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace bpftrain::collector::loader {
namespace {

namespace fs = std::filesystem;

class RdmaSourceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("rdma_source_test." + std::to_string(::getpid()));
    fs::remove_all(root_);
    // Devices: rxe0 (soft-RoCE) and mlx5_0 (a PCI NIC), as sysfs links them.
    device("devices/virtual/infiniband/rxe0", "rxe0", true);
    device("devices/pci0000:00/0000:00:02.0/infiniband/mlx5_0", "mlx5_0", false);
    verbs("uverbs0", "rxe0");
    verbs("uverbs1", "mlx5_0");
    fs::create_directories(root_ / "proc");
  }
  void TearDown() override { fs::remove_all(root_); }

  void device(const std::string& real, const std::string& name, bool parent) {
    fs::create_directories(root_ / "sys" / real);
    if (parent) std::ofstream(root_ / "sys" / real / "parent") << "v0\n";
    fs::create_directories(root_ / "sys/class/infiniband");
    fs::create_directory_symlink(root_ / "sys" / real, root_ / "sys/class/infiniband" / name);
  }
  void verbs(const std::string& uverbs, const std::string& ibdev) {
    fs::create_directories(root_ / "sys/class/infiniband_verbs" / uverbs);
    std::ofstream(root_ / "sys/class/infiniband_verbs" / uverbs / "ibdev") << ibdev << "\n";
  }
  // A process with these fd targets (the targets need not exist: only the links are read).
  void process(uint32_t pid, const std::vector<std::string>& targets) {
    const fs::path fd = root_ / "proc" / std::to_string(pid) / "fd";
    fs::create_directories(fd);
    int n = 0;
    for (const auto& t : targets) fs::create_symlink(t, fd / std::to_string(n++));
  }
  std::vector<std::string> devicesOf(uint32_t pid) {
    return verbsDevicesOf((root_ / "proc").string(), pid,
                          (root_ / "sys/class/infiniband_verbs").string());
  }
  RdmaSourceChoice choose(uint32_t pid, bool kernel_sees_rxe) {
    const auto devices = devicesOf(pid);
    const std::string ib = (root_ / "sys/class/infiniband").string();
    return chooseRdmaSource(devices, kernel_sees_rxe,
                            [&](const std::string& d) { return isSoftRoce(ib, d); });
  }

  fs::path root_;
};

TEST_F(RdmaSourceTest, ReadsTheDevicesAProcessHasOpen) {
  process(10, {"/dev/null", "socket:[123]", "/dev/infiniband/uverbs0", "/dev/infiniband/uverbs0",
               "/dev/infiniband/rdma_cm"});
  EXPECT_EQ(devicesOf(10), std::vector<std::string>{"rxe0"});
  process(11, {"/dev/infiniband/uverbs1", "/dev/infiniband/uverbs0"});
  EXPECT_EQ(devicesOf(11), (std::vector<std::string>{"mlx5_0", "rxe0"}));
  process(12, {"/dev/null"});
  EXPECT_TRUE(devicesOf(12).empty());
  EXPECT_TRUE(devicesOf(99).empty());  // gone
}

TEST_F(RdmaSourceTest, SoftRoceIsAVirtualDeviceWithAParent) {
  const std::string ib = (root_ / "sys/class/infiniband").string();
  EXPECT_TRUE(isSoftRoce(ib, "rxe0"));
  EXPECT_FALSE(isSoftRoce(ib, "mlx5_0"));
  EXPECT_FALSE(isSoftRoce(ib, "absent0"));
}

TEST_F(RdmaSourceTest, TheKernelSideWhereItSeesEveryDeviceElseUprobes) {
  process(20, {"/dev/infiniband/uverbs0"});  // rxe only
  process(21, {"/dev/infiniband/uverbs1"});  // a real NIC
  process(22, {"/dev/infiniband/uverbs0", "/dev/infiniband/uverbs1"});
  process(23, {"/dev/null"});  // no device yet: nothing posted yet either
  EXPECT_EQ(choose(20, true), RdmaSourceChoice::kKernel);
  EXPECT_EQ(choose(21, true), RdmaSourceChoice::kUprobes);
  EXPECT_EQ(choose(22, true), RdmaSourceChoice::kUprobes);
  EXPECT_EQ(choose(23, true), RdmaSourceChoice::kUndecided);
  // No rdma_rxe kprobes (this host: no kprobes): uprobes even on rxe, and from the start.
  EXPECT_EQ(choose(20, false), RdmaSourceChoice::kUprobes);
  EXPECT_EQ(choose(23, false), RdmaSourceChoice::kUprobes);
  EXPECT_EQ(name(RdmaSourceChoice::kKernel), "rxe");
  EXPECT_EQ(name(RdmaSourceChoice::kUprobes), "gloo");
}

}  // namespace
}  // namespace bpftrain::collector::loader
