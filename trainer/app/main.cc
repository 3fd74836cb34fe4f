// bpftrain-train: data-parallel training that bpftrain observes and steers.
#include <cstdio>
#include <string>
#include <vector>

#include "trainer/app/options.h"
#include "trainer/app/rank_runner.h"
#include "trainer/launcher/launcher.h"

namespace {

// The rank processes get every flag except those the launcher decides per rank.
std::vector<std::string> rankArgs(const std::vector<std::string>& args) {
  const std::vector<std::string> launcher_only{"--ranks", "--netns", "--node-of", "--store",
                                               "--restarts"};
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    bool drop = false;
    for (const std::string& f : launcher_only) {
      if (args[i] == f) {
        ++i;  // and its value
        drop = true;
      } else if (args[i].rfind(f + "=", 0) == 0) {
        drop = true;
      }
    }
    if (!drop) out.push_back(args[i]);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace bpftrain::trainer;
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string error;
  auto options = app::parseOptions(args, app::environmentMap(), error);
  if (!options) {
    if (error == "help") {
      std::fputs(app::usage().c_str(), stdout);
      return 0;
    }
    if (error == "version") {
      std::printf("bpftrain-train %s\n", BPFTRAIN_VERSION);
      return 0;
    }
    std::fprintf(stderr, "bpftrain-train: %s\n", error.c_str());
    return 2;
  }
  if (options->ranks > 0) {
    launcher::LaunchSpec spec;
    spec.executable = "/proc/self/exe";
    spec.rank_args = rankArgs(args);
    spec.ranks = options->ranks;
    spec.store = options->store;
    spec.netns = options->netns;
    spec.node_of = options->node_of;
    spec.restarts = options->restarts;
    spec.stop_timeout = std::chrono::seconds(std::min(options->timeout_s, 10));
    return launcher::runLauncher(spec);
  }
  return app::runRank(*options);
}
