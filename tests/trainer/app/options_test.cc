#include "trainer/app/options.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "trainer/app/nccl_environment.h"

namespace bpftrain::trainer::app {
namespace {

std::optional<Options> parse(std::vector<std::string> args, std::map<std::string, std::string> env,
                             std::string& error) {
  return parseOptions(args, env, error);
}

TEST(Options, DefaultsToOneRank) {
  std::string e;
  auto o = parse({}, {}, e);
  ASSERT_TRUE(o) << e;
  EXPECT_EQ(o->rank, 0);
  EXPECT_EQ(o->world, 1);
  EXPECT_EQ(o->rank_source, "single");
  EXPECT_EQ(o->collector, "127.0.0.1:9470");
  EXPECT_EQ(o->control, "127.0.0.1:9472");
  EXPECT_TRUE(o->hugepages);
  EXPECT_TRUE(o->warm_topologies);
}

TEST(Options, VersionIsAskedForLikeHelp) {
  std::string e;
  EXPECT_FALSE(parse({"--version"}, {}, e));
  EXPECT_EQ(e, "version");
  EXPECT_FALSE(parse({"--help"}, {}, e));
  EXPECT_EQ(e, "help");
}

TEST(Options, TakesRankWorldAndLocalRankFromEachLauncher) {
  struct Case {
    std::map<std::string, std::string> env;
    std::string source;
    int rank, world, local_rank, local_world;
  };
  std::vector<Case> cases{
      {{{"OMPI_COMM_WORLD_RANK", "3"},
        {"OMPI_COMM_WORLD_SIZE", "8"},
        {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
        {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}},
       "mpirun",
       3,
       8,
       1,
       2},
      {{{"SLURM_PROCID", "5"},
        {"SLURM_NTASKS", "6"},
        {"SLURM_LOCALID", "2"},
        {"SLURM_NTASKS_PER_NODE", "3"}},
       "srun",
       5,
       6,
       2,
       3},
      {{{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"}},
       "torchrun",
       1,
       4,
       1,
       4},
  };
  for (Case& c : cases) {
    c.env["BPFTRAIN_STORE"] = "/shared/store";
    std::string e;
    auto o = parse({}, c.env, e);
    ASSERT_TRUE(o) << c.source << ": " << e;
    EXPECT_EQ(o->rank_source, c.source);
    EXPECT_EQ(o->rank, c.rank);
    EXPECT_EQ(o->world, c.world);
    EXPECT_EQ(o->local_rank, c.local_rank);
    EXPECT_EQ(o->local_world, c.local_world);
    EXPECT_FALSE(o->local_defaulted);
    EXPECT_EQ(o->store, "/shared/store");
  }
}

TEST(Options, FlagsWinOverTheEnvironment) {
  std::string e;
  auto o = parse({"--rank", "0", "--world", "2", "--store", "/s"},
                 {{"RANK", "1"}, {"WORLD_SIZE", "4"}}, e);
  ASSERT_TRUE(o) << e;
  EXPECT_EQ(o->rank, 0);
  EXPECT_EQ(o->world, 2);
  EXPECT_TRUE(o->local_defaulted);
}

TEST(Options, ParsesEveryContractFlag) {
  std::string e;
  auto o = parse({"--ranks",
                  "4",
                  "--backend",
                  "gloo",
                  "--topology",
                  "bcube",
                  "--pin=numa",
                  "--adaptive",
                  "--secret",
                  "/k",
                  "--collector",
                  "10.0.0.1:9470",
                  "--metrics-hz",
                  "50",
                  "--steps",
                  "10",
                  "--model",
                  "mlp:64x3",
                  "--hugepages",
                  "off",
                  "--warm-topologies",
                  "off",
                  "--checkpoint",
                  "/c",
                  "--checkpoint-every",
                  "5",
                  "--resume",
                  "--batch",
                  "16",
                  "--lr",
                  "0.1",
                  "--seed",
                  "9",
                  "--node-of",
                  "0,0,1,1",
                  "--control",
                  "127.0.0.1:0",
                  "--job",
                  "j1",
                  "--bind",
                  "10.0.0.2",
                  "--netns",
                  "a,a,b,b"},
                 {}, e);
  ASSERT_TRUE(o) << e;
  EXPECT_EQ(o->ranks, 4);
  EXPECT_EQ(o->topology, Topology::kBcube);
  EXPECT_EQ(o->pin, PinMode::kNuma);
  EXPECT_TRUE(o->adaptive);
  EXPECT_EQ(o->metrics_hz, 50);
  EXPECT_EQ(o->model.width, 64);
  EXPECT_EQ(o->model.depth, 3);
  EXPECT_FALSE(o->hugepages);
  EXPECT_FALSE(o->warm_topologies);
  EXPECT_EQ(o->checkpoint_every, 5);
  EXPECT_TRUE(o->resume);
  EXPECT_EQ(o->batch, 16);
  EXPECT_FLOAT_EQ(o->lr, 0.1f);
  EXPECT_EQ(o->seed, 9u);
  EXPECT_EQ(o->node_of, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(o->netns, (std::vector<std::string>{"a", "a", "b", "b"}));
  EXPECT_EQ(o->job, "j1");
  EXPECT_EQ(o->bind, "10.0.0.2");
}

TEST(Options, CheckpointEveryDefaultsTo100WithADirectory) {
  std::string e;
  auto o = parse({"--checkpoint", "/c"}, {}, e);
  ASSERT_TRUE(o) << e;
  EXPECT_EQ(o->checkpoint_every, 100);
}

TEST(Options, RejectsBadCombinationsWithOneLine) {
  std::vector<std::vector<std::string>> bad{
      {"--world", "2"},
      {"--rank", "2", "--world", "2", "--store", "/s"},
      {"--ranks", "0"},
      {"--steps", "-1"},
      {"--lr", "abc"},
      {"--momentum", "1.5"},
      {"--job", "9bad"},
      {"--node-of", "0,x"},
      {"--rank", "0", "--world", "2", "--store", "/s", "--node-of", "0"},
      {"--rank", "0", "--world", "1", "--netns", "a"},
      {"--checkpoint-every", "5"},
      {"--backend", "mpi"},
      {"--sync", "sometimes"},
      {"--allreduce-buckets", "0"},
      {"--allreduce-buckets", "9"},
      {"--backend", "nccl", "--allreduce-buckets", "2"},
      {"--steps"},
      // What --backend nccl cannot honour: Gloo's topologies, the draws that switch them, a
      // fixed algorithm under the controller, NUMA placement of a model in GPU memory, ibverbs.
      {"--backend", "nccl", "--topology", "bcube"},
      {"--backend", "nccl", "--switch-every", "5"},
      {"--backend", "nccl", "--adaptive", "--secret", "/s", "--topology", "tree"},
      {"--backend", "nccl", "--pin", "numa"},
      {"--backend", "nccl", "--transport", "ibverbs", "--topology", "bcube"},
  };
  for (auto& args : bad) {
    std::string e;
    EXPECT_FALSE(parse(args, {}, e)) << args[0];
    EXPECT_FALSE(e.empty());
    EXPECT_EQ(e.find('\n'), std::string::npos) << e;
  }
}

// --topology names NCCL's algorithms once --backend nccl is given (in either order); --adaptive
// is accepted there (the plugin carries it); the one-line refusals name what to do instead.
TEST(Options, NcclBackendTakesNcclAlgorithmsAndAdaptive) {
  std::string e;
  for (const char* algo :
       {"ring", "tree", "collnet_direct", "collnet_chain", "nvls", "nvls_tree"}) {
    auto o = parse({"--topology", algo, "--backend", "nccl"}, {}, e);
    ASSERT_TRUE(o) << algo << ": " << e;
    EXPECT_EQ(o->nccl_algo, algo);
    EXPECT_EQ(o->topology, Topology::kRing);  // the Gloo field keeps its default
  }
  auto o = parse({"--backend", "nccl"}, {}, e);
  ASSERT_TRUE(o) << e;
  EXPECT_EQ(o->nccl_algo, "");  // NCCL's own choice
  o = parse({"--backend", "nccl", "--adaptive", "--secret", "/s", "--pin", "spread"}, {}, e);
  ASSERT_TRUE(o) << e;
  EXPECT_TRUE(o->adaptive);
  // Gloo does not take NCCL's names, and NCCL not Gloo's; each error lists the other's.
  EXPECT_FALSE(parse({"--topology", "tree"}, {}, e));
  EXPECT_NE(e.find("expected ring, halving-doubling, bcube or hierarchical"), std::string::npos)
      << e;
  EXPECT_FALSE(parse({"--backend", "nccl", "--topology", "halving-doubling"}, {}, e));
  EXPECT_NE(e.find("ring, tree, collnet_direct, collnet_chain, nvls or nvls_tree"),
            std::string::npos)
      << e;
  EXPECT_NE(e.find("need --backend gloo"), std::string::npos) << e;
  EXPECT_FALSE(
      parse({"--backend", "nccl", "--adaptive", "--secret", "/s", "--topology", "ring"}, {}, e));
  EXPECT_NE(e.find("--nccl-control chooses"), std::string::npos) << e;
  EXPECT_FALSE(parse({"--backend", "nccl", "--switch-every", "5"}, {}, e));
  EXPECT_NE(e.find("needs --backend gloo"), std::string::npos) << e;
  EXPECT_FALSE(parse({"--backend", "nccl", "--pin", "numa"}, {}, e));
  EXPECT_NE(e.find("GPU memory"), std::string::npos) << e;
  EXPECT_FALSE(parse({"--backend", "nccl", "--adaptive"}, {}, e));
  EXPECT_NE(e.find("--adaptive needs --secret"), std::string::npos) << e;
  EXPECT_NE(usage().find("ring|tree|"), std::string::npos);
  EXPECT_FALSE(parse({"--backend", "nccl", "--topology", "pat"}, {}, e));  // not for allreduce
}

TEST(Options, IbverbsTransportTakesDevicesAndEveryTopology) {
  std::string e;
  auto o = parse({"--ranks", "2", "--transport", "ibverbs", "--rdma-device", "rxe0,rxe1",
                  "--gid-index", "1", "--topology", "bcube"},
                 {}, e);
  ASSERT_TRUE(o) << e;
  EXPECT_EQ(o->transport, "ibverbs");
  EXPECT_EQ(o->rdma_devices, (std::vector<std::string>{"rxe0", "rxe1"}));
  EXPECT_EQ(o->gid_index, 1);
  // The ring and hierarchical's leaders run on bound buffers there (BoundRingAllreduce).
  for (const char* topology : {"ring", "hierarchical", "halving-doubling"}) {
    auto t = parse({"--ranks", "2", "--transport", "ibverbs", "--topology", topology}, {}, e);
    ASSERT_TRUE(t) << topology << ": " << e;
    EXPECT_EQ(topologyName(t->topology), topology);
  }
  EXPECT_FALSE(parse(
      {"--ranks", "3", "--transport", "ibverbs", "--topology", "bcube", "--rdma-device", "a,b"}, {},
      e));
  EXPECT_NE(e.find("one per rank"), std::string::npos) << e;
  EXPECT_FALSE(parse({"--transport", "roce"}, {}, e));
  EXPECT_FALSE(parse({"--rdma-device", "mlx5_0"}, {}, e));
  EXPECT_NE(e.find("need --transport ibverbs"), std::string::npos) << e;
}

// What --backend nccl sets in the environment before NCCL starts (nccl_environment.h): NCCL_ALGO
// from --topology, the plugin and its settings from --adaptive, and the user's own settings win.
// (Here rather than in a file of its own: one gtest translation unit less in CI's build.)
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
  EXPECT_EQ(env.set, (std::vector<EnvAssignment>{{"NCCL_ALGO", "AllReduce:Tree"}}));
  EXPECT_EQ(ncclEnvironment(nccl({"--topology", "nvls_tree"}), {}, kPlugin).set,
            (std::vector<EnvAssignment>{{"NCCL_ALGO", "AllReduce:NVLSTree"}}));
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
  EXPECT_EQ(
      ncclEnvironment(nccl({"--topology", "tree"}), {{"NCCL_ALGO", "allreduce:tree"}}, kPlugin)
          .error,
      "");
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

TEST(NcclEnvironment, TheProjectsProfilerReportsWhenNcclLoadsItAndACollectorListens) {
  using Env = std::map<std::string, std::string>;
  EXPECT_TRUE(bpftrainProfilerReports(Env{{"NCCL_PROFILER_PLUGIN", "bpftrain"}}));
  EXPECT_TRUE(bpftrainProfilerReports(Env{
      {"NCCL_PROFILER_PLUGIN", "/opt/b/lib/libnccl-bpftrain.so"}, {"BPFTRAIN_COLLECTOR", "h:1"}}));
  EXPECT_TRUE(
      bpftrainProfilerReports(Env{{"NCCL_PROFILER_PLUGIN", "libnccl-profiler-bpftrain.so"}}));
  EXPECT_FALSE(bpftrainProfilerReports(Env{}));
  EXPECT_FALSE(
      bpftrainProfilerReports(Env{{"NCCL_PROFILER_PLUGIN", "/x/libnccl-profiler-other.so"}}));
  EXPECT_FALSE(
      bpftrainProfilerReports(Env{{"NCCL_PROFILER_PLUGIN", "/bpftrain/libnccl-other.so"}}));
  EXPECT_FALSE(bpftrainProfilerReports(
      Env{{"NCCL_PROFILER_PLUGIN", "bpftrain"}, {"BPFTRAIN_COLLECTOR", "off"}}));
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
