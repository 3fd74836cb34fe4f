// Allreduce bus-bandwidth benchmark: forks --ranks local rank processes that rendezvous through a
// temporary file store on 127.0.0.1 and time every topology on the same buffer, interleaved, for
// message sizes --min .. --max (x4 steps). Prints one line per (size, topology):
//   RESULT ranks=4 topology=ring bytes=67108864 seconds=0.1234 algbw_gbit=... busbw_gbit=...
// tools/bench.d/allreduce joins these with Open MPI's figures into a table.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "trainer/collective/communicator.h"

namespace bpftrain::trainer::collective {
namespace {

struct Args {
  int ranks = 2;
  size_t min_bytes = 4 << 10;
  size_t max_bytes = 256u << 20;
  double target_seconds = 0.25;  // per measurement
  int reps = 3;                  // median of reps, topologies interleaved
  std::vector<Topology> topologies = {Topology::kRing, Topology::kHalvingDoubling, Topology::kBcube,
                                      Topology::kHierarchical};
  int ranks_per_node = 0;  // 0: every rank its own node (hierarchical = leader ring)
  bool shared_memory = true;
  std::string suffix;  // appended to topology names in RESULT lines
};

size_t parseBytes(const char* s) {
  char* end = nullptr;
  double v = std::strtod(s, &end);
  switch (end && *end ? *end : ' ') {
    case 'K':
    case 'k':
      v *= 1 << 10;
      break;
    case 'M':
    case 'm':
      v *= 1 << 20;
      break;
    case 'G':
    case 'g':
      v *= 1 << 30;
      break;
    default:
      break;
  }
  return size_t(v);
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "allreduce_bench: %s\nusage: allreduce_bench [--ranks N] [--min 4K] [--max 256M] "
               "[--seconds 0.25] [--reps 3] [--topologies ring,halving-doubling,bcube,"
               "hierarchical] [--ranks-per-node K] [--no-shm] [--suffix S]\n",
               why);
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    if (k == "--no-shm") {
      a.shared_memory = false;
      continue;
    }
    if (i + 1 >= argc) usage(("missing value for " + k).c_str());
    const char* v = argv[++i];
    if (k == "--ranks")
      a.ranks = std::atoi(v);
    else if (k == "--suffix")
      a.suffix = v;
    else if (k == "--min")
      a.min_bytes = parseBytes(v);
    else if (k == "--max")
      a.max_bytes = parseBytes(v);
    else if (k == "--seconds")
      a.target_seconds = std::atof(v);
    else if (k == "--reps")
      a.reps = std::atoi(v);
    else if (k == "--ranks-per-node")
      a.ranks_per_node = std::atoi(v);
    else if (k == "--topologies") {
      a.topologies.clear();
      std::string list = v;
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t comma = list.find(',', pos);
        if (comma == std::string::npos) comma = list.size();
        auto t = parseTopology(list.substr(pos, comma - pos));
        if (!t) usage(("unknown topology in " + list).c_str());
        a.topologies.push_back(*t);
        pos = comma + 1;
      }
    } else {
      usage(("unknown flag " + k).c_str());
    }
  }
  if (a.ranks < 1 || a.min_bytes < 4 || a.max_bytes < a.min_bytes || a.reps < 1)
    usage("bad values");
  return a;
}

int runRank(const Args& a, const std::string& store, int rank) {
  CommOptions o;
  o.rank = rank;
  o.world = a.ranks;
  o.store = store;
  o.timeout = std::chrono::seconds(60);
  o.shared_memory = a.shared_memory;
  for (int r = 0; r < a.ranks; ++r)
    o.node_of.push_back(a.ranks_per_node > 0 ? r / a.ranks_per_node : r);
  auto comm = Communicator::create(o);
  std::vector<float> buf(a.max_bytes / sizeof(float), 0.0f);  // zeros: sums stay finite
  using Clock = std::chrono::steady_clock;
  for (size_t bytes = a.min_bytes; bytes <= a.max_bytes; bytes *= 4) {
    std::span<float> data(buf.data(), bytes / sizeof(float));
    // Warm-up builds each topology's buffers; calibrate iterations on the slowest topology.
    double slowest = 0;
    for (Topology t : a.topologies) {
      comm->allreduce(data, t);
      comm->barrier();
      auto s = Clock::now();
      comm->allreduce(data, t);
      slowest = std::max(slowest, std::chrono::duration<double>(Clock::now() - s).count());
    }
    int iters = int(std::clamp(a.target_seconds / std::max(slowest, 1e-7), 1.0, 2000.0));
    comm->broadcast(std::span<uint8_t>(reinterpret_cast<uint8_t*>(&iters), sizeof iters), 0);
    std::vector<std::vector<double>> samples(a.topologies.size());
    for (int rep = 0; rep < a.reps; ++rep) {
      for (size_t ti = 0; ti < a.topologies.size(); ++ti) {
        comm->barrier();
        auto s = Clock::now();
        for (int i = 0; i < iters; ++i) comm->allreduce(data, a.topologies[ti]);
        samples[ti].push_back(std::chrono::duration<double>(Clock::now() - s).count() / iters);
      }
    }
    // Median per rank, then the mean over ranks (the nccl-tests way of averaging ranks).
    std::vector<float> medians(a.topologies.size());
    for (size_t ti = 0; ti < samples.size(); ++ti) {
      auto& v = samples[ti];
      std::sort(v.begin(), v.end());
      medians[ti] = float(v[v.size() / 2]);
    }
    comm->allreduce(medians, Topology::kRing);
    if (rank == 0) {
      for (size_t ti = 0; ti < a.topologies.size(); ++ti) {
        const double sec = medians[ti] / a.ranks;
        std::printf(
            "RESULT ranks=%d topology=%s bytes=%zu iters=%d seconds=%.9f algbw_gbit=%.3f "
            "busbw_gbit=%.3f\n",
            a.ranks, (std::string(topologyName(a.topologies[ti])) + a.suffix).c_str(), bytes, iters,
            sec, bytes / sec * 8e-9, busBandwidth(double(bytes), sec, a.ranks) * 8e-9);
      }
      std::fflush(stdout);
    }
  }
  comm->barrier();
  return 0;
}

}  // namespace
}  // namespace bpftrain::trainer::collective

int main(int argc, char** argv) {
  using namespace bpftrain::trainer::collective;
  const Args a = parse(argc, argv);
  char tmpl[] = "/tmp/bpftrain-allreduce-bench-XXXXXX";
  const std::string store = mkdtemp(tmpl);
  std::vector<pid_t> pids;
  for (int r = 0; r < a.ranks; ++r) {
    pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      int rc = 1;
      try {
        rc = runRank(a, store, r);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "allreduce_bench rank %d: %s\n", r, e.what());
      }
      std::fflush(stdout);
      _exit(rc);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t p : pids) {
    int st = 0;
    if (waitpid(p, &st, 0) != p || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      ++failed;
      // A failed rank makes the others fail at their timeout; do not wait for that.
      for (pid_t q : pids) kill(q, SIGTERM);
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(store, ec);
  if (failed) std::fprintf(stderr, "allreduce_bench: %d rank(s) failed\n", failed);
  return failed ? 1 : 0;
}
