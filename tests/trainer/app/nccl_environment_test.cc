// What --backend nccl sets in the environment before NCCL starts (nccl_environment.h): NCCL_ALGO
// from --topology, the plugin and its settings from --adaptive, and the user's own settings win.
#include "trainer/app/nccl_environment.h"

#include <gtest/gtest.h>

#include <fstream>

#include "trainer/app/options.h"

namespace bpftrain::trainer::app {
namespace {

Options nccl(std::vector<std::string> args) {
  args.insert(args.begin(), {"--backend", "nccl"});
  std::string e;
  auto o = parseOptions(args, {}, e);
  EXPECT_TRUE(o) << e;
  return o.value_or(Options{});
}

const PluginSearch kPlugin{"/opt/bpftrain/lib/libnccl-bpftrain.so", {"/build", "/opt"}};

TEST(NcclEnvironment, TopologyBecomesNcclAlgo) {
  auto env = ncclEnvironment(nccl({"--topology", "tree"}), {}, kPlugin);
  EXPECT_EQ(env.error, "");
  EXPECT_EQ(env.set, (std::vector<EnvAssignment>{{"NCCL_ALGO", "Tree"}}));
  EXPECT_EQ(ncclEnvironment(nccl({"--topology", "nvls_tree"}), {}, kPlugin).set,
            (std::vector<EnvAssignment>{{"NCCL_ALGO", "NVLSTree"}}));
  // NCCL's own choice, and a Gloo run, set nothing.
  EXPECT_TRUE(ncclEnvironment(nccl({}), {}, kPlugin).set.empty());
  Options gloo;
  gloo.adaptive = true;
  EXPECT_TRUE(ncclEnvironment(gloo, {}, kPlugin).set.empty());
}

TEST(NcclEnvironment, TheUsersNcclAlgoWinsOnlyWhenItAgrees) {
  auto same = ncclEnvironment(nccl({"--topology", "ring"}), {{"NCCL_ALGO", "RING"}}, kPlugin);
  EXPECT_EQ(same.error, "");
  EXPECT_TRUE(same.set.empty());
  EXPECT_EQ(same.kept, (std::vector<std::string>{"NCCL_ALGO=RING"}));
  auto other = ncclEnvironment(nccl({"--topology", "ring"}), {{"NCCL_ALGO", "Tree"}}, kPlugin);
  EXPECT_NE(other.error.find("NCCL_ALGO=Tree"), std::string::npos) << other.error;
  EXPECT_NE(other.error.find("unset NCCL_ALGO or drop --topology"), std::string::npos);
  EXPECT_EQ(other.error.find('\n'), std::string::npos);
}

TEST(NcclEnvironment, AdaptiveLoadsThePluginWithTheTrainersSettings) {
  auto env = ncclEnvironment(
      nccl({"--adaptive", "--secret", "/etc/s", "--job", "llm", "--collector", "10.0.0.1:9470"}),
      {}, kPlugin);
  EXPECT_EQ(env.error, "");
  EXPECT_EQ(env.set, (std::vector<EnvAssignment>{
                         {"NCCL_TUNER_PLUGIN", kPlugin.found},
                         {"NCCL_PROFILER_PLUGIN", kPlugin.found},
                         {"BPFTRAIN_COLLECTOR", "10.0.0.1:9470"},
                         {"BPFTRAIN_JOB", "llm"},
                         {"BPFTRAIN_SECRET_FILE", "/etc/s"},
                     }));
  // --collector none is the plugin's "off".
  auto off =
      ncclEnvironment(nccl({"--adaptive", "--secret", "/s", "--collector", "none"}), {}, kPlugin);
  EXPECT_EQ(off.set[2], (EnvAssignment{"BPFTRAIN_COLLECTOR", "off"}));
}

TEST(NcclEnvironment, TheUsersOwnPluginSettingsWin) {
  const std::map<std::string, std::string> theirs{{"NCCL_TUNER_PLUGIN", "/mine/tuner.so"},
                                                  {"BPFTRAIN_JOB", "theirs"},
                                                  {"BPFTRAIN_COLLECTOR", ""}};  // empty: unset
  auto env = ncclEnvironment(nccl({"--adaptive", "--secret", "/s"}), theirs, kPlugin);
  EXPECT_EQ(env.error, "");
  EXPECT_EQ(env.set, (std::vector<EnvAssignment>{
                         {"NCCL_PROFILER_PLUGIN", kPlugin.found},
                         {"BPFTRAIN_COLLECTOR", "127.0.0.1:9470"},
                         {"BPFTRAIN_SECRET_FILE", "/s"},
                     }));
  EXPECT_EQ(env.kept,
            (std::vector<std::string>{"NCCL_TUNER_PLUGIN=/mine/tuner.so", "BPFTRAIN_JOB=theirs"}));
}

TEST(NcclEnvironment, AMissingPluginIsOneLineNamingWhereItLooked) {
  const PluginSearch none{"", {"/build/plugins/nccl/libnccl-bpftrain.so", "/usr/lib/x.so"}};
  auto env = ncclEnvironment(nccl({"--adaptive", "--secret", "/s"}), {}, none);
  EXPECT_NE(env.error.find("/build/plugins/nccl/libnccl-bpftrain.so, /usr/lib/x.so"),
            std::string::npos)
      << env.error;
  EXPECT_NE(env.error.find("nccl-bpftrain target"), std::string::npos) << env.error;
  EXPECT_EQ(env.error.find('\n'), std::string::npos);
  // Both plugin variables of the user's own: nothing to find.
  auto theirs = ncclEnvironment(nccl({"--adaptive", "--secret", "/s"}),
                                {{"NCCL_TUNER_PLUGIN", "a"}, {"NCCL_PROFILER_PLUGIN", "b"}}, none);
  EXPECT_EQ(theirs.error, "");
}

TEST(NcclEnvironment, FindsTheFirstCandidateThatIsAFile) {
  const std::string dir = ::testing::TempDir();
  const std::string file = dir + "/libnccl-bpftrain-test.so";
  std::ofstream(file) << "x";
  auto s = findNcclPlugin({dir + "/absent.so", dir, file});
  EXPECT_EQ(s.found, file);  // a directory is not a plugin
  EXPECT_EQ(s.looked_in.size(), 3u);
  EXPECT_EQ(findNcclPlugin({dir + "/absent.so"}).found, "");
  std::remove(file.c_str());
  // The build's own candidates name this build tree's plugin first.
  auto built = findNcclPlugin();
  ASSERT_FALSE(built.looked_in.empty());
  EXPECT_NE(built.looked_in[0].find("libnccl-bpftrain.so"), std::string::npos);
}

}  // namespace
}  // namespace bpftrain::trainer::app
