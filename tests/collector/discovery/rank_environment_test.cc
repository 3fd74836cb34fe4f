// identifyRank() on environment blocks as launchers write them (fixtures/*.environ, NUL-separated
// as /proc/PID/environ holds them): the rank and job each launcher's ranks get, and the processes
// that are no rank (agents, mpirun, a batch script) left out.
#include "collector/discovery/rank_environment.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "tests/support/temp_dir.h"

namespace bpftrain::collector::discovery {
namespace {

using namespace std::string_literals;

std::string fixture(const std::string& name) {
  const char* src = std::getenv("BPFTRAIN_SOURCE_DIR");
  std::ifstream in(std::string(src ? src : ".") + "/tests/collector/discovery/fixtures/" + name,
                   std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_FALSE(ss.str().empty()) << name;
  return ss.str();
}

struct Expected {
  const char* file;
  const char* launcher;
  const char* job;
  uint32_t rank;
  int32_t local_rank;
  uint32_t world;
};

class Launchers : public ::testing::TestWithParam<Expected> {};

TEST_P(Launchers, RankAndJobFromTheEnvironment) {
  const Expected& e = GetParam();
  auto id = identifyRank(fixture(e.file));
  ASSERT_TRUE(id.has_value()) << e.file;
  EXPECT_EQ(id->launcher, e.launcher);
  EXPECT_EQ(id->job, e.job);
  EXPECT_EQ(id->rank, e.rank);
  EXPECT_EQ(id->local_rank, e.local_rank);
  EXPECT_EQ(id->world, e.world);
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, Launchers,
    ::testing::Values(
        // torchrun's default run id "none" names nothing: the rendezvous address does.
        Expected{"torchrun_worker.environ", "torchrun", "127.0.0.1:29500", 1, 1, 2},
        Expected{"torchrun_standalone_worker.environ", "torchrun",
                 "4b3b6c9a-1f7e-4c2a-9d55-0a1e2f3b4c5d", 2, 0, 4},
        // Open MPI 4.1: the job id mpirun gives its ranks (not the HNP's job family).
        Expected{"ompi_rank.environ", "mpirun", "1637089281", 1, 1, 2},
        Expected{"ompi_hnp_only.environ", "mpirun", "2873753600", 3, 3, 8},
        Expected{"pmix_rank.environ", "pmix", "prterun-node1-12345@1", 5, -1, 0},
        Expected{"srun_task.environ", "slurm", "4242.0", 7, 3, 16},
        // Nested: torch's numbering, the scheduler's job id.
        Expected{"torchrun_under_srun.environ", "torchrun", "4242.1", 5, 1, 8},
        Expected{"torch_env_manual.environ", "torch", "10.1.2.3:23456", 0, -1, 2}),
    [](const auto& info) {
      std::string name = info.param.file;
      return name.substr(0, name.find('.'));
    });

TEST(RankEnvironment, LaunchersAndStrangersAreNoRank) {
  for (const char* file : {"torchrun_agent.environ", "mpirun.environ", "sbatch_script.environ",
                           "rank_without_world.environ", "rank_outside_world.environ"})
    EXPECT_FALSE(identifyRank(fixture(file)).has_value()) << file;
  EXPECT_FALSE(identifyRank("").has_value());
  EXPECT_FALSE(identifyRank("RANK=x\0WORLD_SIZE=2\0MASTER_ADDR=a\0MASTER_PORT=1"s).has_value());
}

TEST(RankEnvironment, JobLabelIsPrintableAndBounded) {
  auto id = identifyRank(fixture("torchrun_odd_run_id.environ"));
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->job.size(), kMaxJobLabel);
  EXPECT_EQ(id->job.rfind("my__run__xxx", 0), 0u) << id->job;
  for (char c : id->job) EXPECT_TRUE(c > 0x20 && c < 0x7f && c != '"' && c != '\\') << id->job;
}

TEST(RankEnvironment, FirstDefinitionWinsAndUnterminatedLastEntryCounts) {
  const std::string block = "RANK=1\0RANK=7\0WORLD_SIZE=4\0TORCHELASTIC_RUN_ID=r"s;
  auto id = identifyRank(block);
  ASSERT_TRUE(id.has_value());
  EXPECT_EQ(id->rank, 1u);
  EXPECT_EQ(id->job, "r");
}

TEST(RankEnvironment, ReadsProcEnviron) {
  testing::TempDir root;
  ASSERT_FALSE(root.path().empty());
  const std::string dir = root.path() + "/42";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0);
  const std::string block = fixture("ompi_rank.environ");
  std::ofstream(dir + "/environ", std::ios::binary) << block;
  std::string out;
  ASSERT_TRUE(readEnviron(root.path(), 42, out));
  EXPECT_EQ(out, block);
  ASSERT_TRUE(readEnviron(root.path(), 42, out, 10));
  EXPECT_EQ(out.size(), 10u);
  EXPECT_FALSE(readEnviron(root.path(), 43, out));
  // This process's own environment through the real /proc.
  ASSERT_TRUE(readEnviron("/proc", ::getpid(), out));
  EXPECT_NE(out.find("BPFTRAIN_SOURCE_DIR="), std::string::npos);
}

}  // namespace
}  // namespace bpftrain::collector::discovery
