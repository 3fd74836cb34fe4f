#include "trainer/pinning/copied_pages.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

namespace bpftrain::trainer::pinning {
namespace {

// A private mapping of a 4-page file in which the test writes one page: that page is a copy
// (anonymous), the three others are the file's page-cache pages. Only the copy may be moved.
class CopiedPagesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    page_ = size_t(sysconf(_SC_PAGESIZE));
    char path[] = "/tmp/copied-pages-XXXXXX";
    fd_ = mkstemp(path);
    ASSERT_GE(fd_, 0);
    unlink(path);
    const std::string zeros(4 * page_, 'x');
    ASSERT_EQ(write(fd_, zeros.data(), zeros.size()), ssize_t(zeros.size()));
    map_ =
        static_cast<char*>(mmap(nullptr, 4 * page_, PROT_READ | PROT_WRITE, MAP_PRIVATE, fd_, 0));
    ASSERT_NE(map_, MAP_FAILED);
  }
  void TearDown() override {
    if (map_ != nullptr && map_ != MAP_FAILED) munmap(map_, 4 * page_);
    if (fd_ >= 0) close(fd_);
  }
  AddressRange range() const {
    return {reinterpret_cast<uintptr_t>(map_), reinterpret_cast<uintptr_t>(map_) + 4 * page_};
  }
  size_t page_ = 4096;
  int fd_ = -1;
  char* map_ = nullptr;
};

TEST_F(CopiedPagesTest, MovesTheWrittenPageOnlyNotTheFilesPages) {
  volatile char sink = 0;
  for (size_t i = 0; i < 4; ++i) sink = sink + map_[i * page_];  // all four present, from the file
  map_[2 * page_] = 'y';                                         // one copied
  const AddressRange ranges[] = {range()};
  long moved = -1;
  // Node 0 exists on every machine; the page is already there, and move_pages reports it so.
  EXPECT_EQ(moveCopiedFilePages(ranges, 0, moved), 0);
  EXPECT_EQ(moved, 1);
}

TEST_F(CopiedPagesTest, UntouchedMappingHasNothingToMove) {
  const AddressRange ranges[] = {range()};
  long moved = -1;
  EXPECT_EQ(moveCopiedFilePages(ranges, 0, moved), 0);
  EXPECT_EQ(moved, 0);
}

TEST_F(CopiedPagesTest, ANodeThatDoesNotExistIsAnErrorNotACrash) {
  map_[0] = 'y';
  const AddressRange ranges[] = {range()};
  long moved = -1;
  EXPECT_NE(moveCopiedFilePages(ranges, 1000, moved), 0);
  EXPECT_EQ(moved, 0);
}

}  // namespace
}  // namespace bpftrain::trainer::pinning
