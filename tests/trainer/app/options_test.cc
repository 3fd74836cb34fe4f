#include "trainer/app/options.h"

#include <gtest/gtest.h>

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
       {"ring", "tree", "collnet_direct", "collnet_chain", "nvls", "nvls_tree", "pat"}) {
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
  EXPECT_NE(e.find("ring, tree, collnet_direct, collnet_chain, nvls, nvls_tree or pat"),
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
  EXPECT_NE(usage().find("ring|tree|collnet_direct"), std::string::npos);
}

TEST(Options, IbverbsTransportTakesDevicesAndRefusesUnboundTopologies) {
  std::string e;
  auto o = parse({"--ranks", "2", "--transport", "ibverbs", "--rdma-device", "rxe0,rxe1",
                  "--gid-index", "1", "--topology", "bcube"},
                 {}, e);
  ASSERT_TRUE(o) << e;
  EXPECT_EQ(o->transport, "ibverbs");
  EXPECT_EQ(o->rdma_devices, (std::vector<std::string>{"rxe0", "rxe1"}));
  EXPECT_EQ(o->gid_index, 1);
  // The default topology (ring) runs on unbound buffers: one line naming those that can run.
  EXPECT_FALSE(parse({"--ranks", "2", "--transport", "ibverbs"}, {}, e));
  EXPECT_NE(e.find("halving-doubling or bcube"), std::string::npos) << e;
  EXPECT_FALSE(
      parse({"--ranks", "2", "--transport", "ibverbs", "--topology", "hierarchical"}, {}, e));
  EXPECT_FALSE(parse(
      {"--ranks", "3", "--transport", "ibverbs", "--topology", "bcube", "--rdma-device", "a,b"}, {},
      e));
  EXPECT_NE(e.find("one per rank"), std::string::npos) << e;
  EXPECT_FALSE(parse({"--transport", "roce"}, {}, e));
  EXPECT_FALSE(parse({"--rdma-device", "mlx5_0"}, {}, e));
  EXPECT_NE(e.find("need --transport ibverbs"), std::string::npos) << e;
}

}  // namespace
}  // namespace bpftrain::trainer::app
