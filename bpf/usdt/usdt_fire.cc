// bpftrain-usdt-fire COUNT [--wait-stdin]: fires COUNT bpftrain:qp_post and COUNT
// bpftrain:qp_complete probes on QP 7, outstanding rising to COUNT then falling to 0.
// With --wait-stdin it prints "ready <pid>" and waits for a line on stdin first, so a tracer can
// attach before the events fire (the USDT test's known-answer workload).
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "bpf/usdt/bpftrain_usdt.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s COUNT [--wait-stdin]\n", argv[0]);
    return 2;
  }
  const long count = std::strtol(argv[1], nullptr, 10);
  if (count < 0) {
    std::fprintf(stderr, "%s: COUNT must be >= 0\n", argv[0]);
    return 2;
  }
  if (argc > 2 && std::strcmp(argv[2], "--wait-stdin") == 0) {
    std::printf("ready %d\n", static_cast<int>(getpid()));
    std::fflush(stdout);
    char line[64];
    if (!std::fgets(line, sizeof(line), stdin)) return 1;
  }
  constexpr uint32_t kQp = 7;
  for (long i = 1; i <= count; ++i) BPFTRAIN_QP_POST(kQp, i);
  for (long i = count - 1; i >= 0; --i) BPFTRAIN_QP_COMPLETE(kQp, i);
  std::printf("fired %ld qp_post %ld qp_complete\n", count, count);
  return 0;
}
