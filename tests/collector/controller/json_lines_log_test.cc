#include "collector/controller/json_lines_log.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "tests/support/temp_dir.h"

namespace bpftrain::collector::controller {
namespace {

std::vector<std::string> linesOf(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

// Each record is one line, on disk as soon as write returns (no close needed); a reopened log
// appends.
TEST(JsonLinesLog, WritesOneFlushedLinePerRecordAndAppends) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/decisions.jsonl";
  std::string error;
  {
    JsonLinesLog log;
    ASSERT_TRUE(log.open(path, "decisions log", error)) << error;
    log.write({{"event", "decision"}, {"detail", "two\nlines"}});
    EXPECT_EQ(linesOf(path),
              std::vector<std::string>{R"({"detail":"two\nlines","event":"decision"})"});
  }
  JsonLinesLog again;
  ASSERT_TRUE(again.open(path, "decisions log", error)) << error;
  again.write({{"event", "applied"}});
  EXPECT_EQ(linesOf(path).size(), 2u);
  EXPECT_EQ(linesOf(path).back(), R"({"event":"applied"})");
}

TEST(JsonLinesLog, AnEmptyPathIsNoLogAndAnUnwritableOneSaysWhatToDo) {
  std::string error;
  JsonLinesLog none;
  EXPECT_TRUE(none.open("", "features log", error));
  EXPECT_FALSE(none.isOpen());
  none.write({{"event", "x"}});  // nothing to write to, no crash
  JsonLinesLog bad;
  EXPECT_FALSE(bad.open("/nonexistent-dir/d.jsonl", "features log", error));
  EXPECT_NE(error.find("features log '/nonexistent-dir/d.jsonl'"), std::string::npos) << error;
  EXPECT_NE(error.find("No such file or directory"), std::string::npos) << error;
  EXPECT_NE(error.find("choose a writable path"), std::string::npos) << error;
}

}  // namespace
}  // namespace bpftrain::collector::controller
