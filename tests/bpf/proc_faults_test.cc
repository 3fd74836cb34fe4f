// The faults module's /proc/PID/stat parser (a process target's page faults): fixed lines, and
// this process's own line counting pages it touches.
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <fstream>
#include <sstream>
#include <string>

#include "collector/loader/probes/faults.h"

namespace bpftrain::collector::loader::probes::faults {
namespace {

TEST(ProcFaults, MinorPlusMajorAfterTheLastParenthesis) {
  // A command name may hold spaces and parentheses: ") 9 9 9 9 9 9 9 " inside it must not count.
  const std::string line =
      "4242 (evil) 9 9 9 9 9 9 9 (x) S 1 4242 4242 0 -1 4194560 1500 77 12 3 40 8 0 0 20 0 3 0 "
      "1234 5000000 300 18446744073709551615 0 0 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
  EXPECT_EQ(parseStatFaults(line), 1512u);
}

TEST(ProcFaults, NotAStatLine) {
  EXPECT_EQ(parseStatFaults(""), std::nullopt);
  EXPECT_EQ(parseStatFaults("no parenthesis 1 2 3 4 5 6 7 8 9 10"), std::nullopt);
  EXPECT_EQ(parseStatFaults("1 (short) S 1 1 1 0 -1 0 5"), std::nullopt);  // no majflt
  EXPECT_EQ(parseStatFaults("1 (bad) S 1 1 1 0 -1 0 x 0 0"), std::nullopt);
}

uint64_t ownFaults() {
  std::ifstream in("/proc/self/stat");
  std::stringstream text;
  text << in.rdbuf();
  return parseStatFaults(text.str()).value_or(0);
}

TEST(ProcFaults, OwnLineCountsFreshPages) {
  constexpr size_t kPages = 256;
  const long page = sysconf(_SC_PAGESIZE);
  const uint64_t before = ownFaults();
  ASSERT_GT(before, 0u);
  void* mem =
      mmap(nullptr, kPages * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  madvise(mem, kPages * page, MADV_NOHUGEPAGE);  // one fault per page, not one per 2 MiB
  for (size_t i = 0; i < kPages; ++i) static_cast<volatile char*>(mem)[i * page] = 1;
  const uint64_t after = ownFaults();
  munmap(mem, kPages * page);
  EXPECT_GE(after - before, kPages);
}

}  // namespace
}  // namespace bpftrain::collector::loader::probes::faults
