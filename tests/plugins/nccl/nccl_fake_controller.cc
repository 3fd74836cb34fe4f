// Plays the collector and a fixed-decision NCCL controller for tools/gpu-check (the collector's
// own, --nccl-control, chooses the pair by measurement): listens on UDP HOST:PORT where the ranks'
// plugins send (BPFTRAIN_COLLECTOR), waits for N ranks' hellos and tuner progress, sends each rank
// one signed decision starting MARGIN calls after the most advanced rank, and reports which
// algorithm/protocol the profilers saw collectives run with before and after the switch.
//   nccl_fake_controller PORT RANKS JOB SECRET_FILE ALGORITHM PROTOCOL MARGIN SECONDS
// ALGORITHM 0..6 (TREE RING COLLNET_DIRECT COLLNET_CHAIN NVLS NVLS_TREE PAT), PROTOCOL 0..2
// (LL LL128 SIMPLE). Exit 0 when every collective the profilers reported after the switch ran
// with the decision, 1 otherwise (or when nothing was reported), 2 on bad arguments.
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "plugins/nccl/profiler.h"
#include "tests/plugins/nccl/plugin_harness.h"

using namespace bpftrain::testing::nccl;
using namespace std::chrono_literals;

namespace {

// bpftrain_nccl_collectives{comm,collective,algorithm,protocol}, summed over comm and collective.
std::map<std::string, double> byAlgorithm(const std::map<std::string, double>& values) {
  std::map<std::string, double> out;
  const std::string prefix = "bpftrain_nccl_collectives{";
  for (const auto& [key, v] : values) {
    if (key.rfind(prefix, 0) != 0) continue;
    std::string labels = key.substr(prefix.size(), key.size() - prefix.size() - 1);
    size_t second = labels.find(',', labels.find(',') + 1);
    out[labels.substr(second + 1)] += v;  // "algorithm,protocol"
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 9) {
    std::fprintf(stderr,
                 "usage: nccl_fake_controller PORT RANKS JOB SECRET_FILE ALGORITHM PROTOCOL "
                 "MARGIN SECONDS\n");
    return 2;
  }
  const int port = std::atoi(argv[1]);
  const size_t ranks = size_t(std::atoi(argv[2]));
  const std::string job = argv[3];
  std::ifstream sf(argv[4]);
  std::stringstream secret;
  secret << sf.rdbuf();
  const int algorithm = std::atoi(argv[5]), protocol = std::atoi(argv[6]);
  const uint64_t margin = std::strtoull(argv[7], nullptr, 10);
  const auto limit = std::chrono::seconds(std::atoi(argv[8]));
  if (port <= 0 || ranks == 0 || secret.str().empty()) {
    std::fprintf(stderr, "nccl_fake_controller: bad PORT, RANKS or empty SECRET_FILE\n");
    return 2;
  }
  FakeCollector collector{uint16_t(port)};
  const auto deadline = std::chrono::steady_clock::now() + limit;
  auto left = [&] {
    return std::chrono::duration_cast<std::chrono::milliseconds>(deadline -
                                                                 std::chrono::steady_clock::now());
  };
  bool ready = collector.receiveUntil(
      [&] {
        if (collector.senders.size() < ranks || collector.tuner_calls.size() < ranks) return false;
        for (auto& [id, calls] : collector.tuner_calls)
          if (calls == 0) return false;
        return true;
      },
      left());
  if (!ready) {
    std::printf("fake controller: %zu of %zu ranks said hello, %zu reported tuner calls\n",
                collector.senders.size(), ranks, collector.tuner_calls.size());
    return 1;
  }
  uint64_t ahead = 0;
  for (auto& [id, calls] : collector.tuner_calls) ahead = std::max(ahead, calls);
  const auto before = byAlgorithm(collector.values);
  bpftrain::wire::NcclControl c;
  c.job = job;
  c.epoch = 1;
  c.start_call = ahead + margin;
  c.algorithm = uint8_t(algorithm);
  c.protocol = uint8_t(protocol);
  for (auto& [id, sender] : collector.senders) collector.sendDecision(c, sender, secret.str());
  std::printf(
      "fake controller: decision algorithm %d protocol %d from tuner call %llu sent to %zu "
      "ranks\n",
      algorithm, protocol, static_cast<unsigned long long>(c.start_call), collector.senders.size());
  // Every rank past the start call, plus two flushes for the profilers' counts to arrive.
  collector.receiveUntil(
      [&] {
        for (auto& [id, calls] : collector.tuner_calls)
          if (calls < c.start_call + 50) return false;
        return true;
      },
      left());
  collector.receiveUntil([] { return false; }, std::min(left(), std::chrono::milliseconds(1000)));
  const auto after = byAlgorithm(collector.values);
  const std::string decided = std::string(bpftrain::nccl_plugin::kAlgoLabels[algorithm]) + "," +
                              bpftrain::nccl_plugin::kProtoLabels[protocol];
  double wrong = 0, right = 0;
  for (const auto& [k, v] : after) {
    double delta = v - (before.count(k) ? before.at(k) : 0);
    std::printf("fake controller: %s: %.0f collectives before the decision, %.0f since\n",
                k.c_str(), before.count(k) ? before.at(k) : 0, delta);
    (k == decided ? right : wrong) += delta;
  }
  // Collectives between the decision and the start call still ran NCCL's choice: the ones
  // counted since are an upper bound on those, so demand most ran with the decision.
  const bool ok = right > 0 && right >= 4 * wrong;
  std::printf("fake controller: %s (%s: %.0f, others: %.0f since the decision)\n",
              ok ? "the profiler's algorithm follows the decision" : "NOT FOLLOWED",
              decided.c_str(), right, wrong);
  return ok ? 0 : 1;
}
