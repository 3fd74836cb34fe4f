// The collector's --config file (collector/app/config.h): any bytes either load or give one error
// line naming the problem; a loaded configuration holds the invariants loadConfig promises.
#include <sys/mman.h>
#include <unistd.h>

#include <string>

#include "collector/app/config.h"
#include "tests/fuzz/fuzz_check.h"

using namespace bpftrain::collector::app;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One in-memory file, rewritten for each input; loadConfig opens it by path.
  static const int fd = memfd_create("bpftrain-fuzz-config", MFD_CLOEXEC);
  static const std::string path = "/proc/self/fd/" + std::to_string(fd);
  FUZZ_CHECK(fd >= 0);
  FUZZ_CHECK(ftruncate(fd, 0) == 0);
  FUZZ_CHECK(pwrite(fd, data, size, 0) == ssize_t(size));
  const char* argv[] = {"bpftrain-collector", "--config", path.c_str()};
  CollectorConfig config;
  std::string error;
  if (!loadConfig(3, argv, config, error)) {
    FUZZ_CHECK(!error.empty() && error.find('\n') == std::string::npos);
    return 0;
  }
  FUZZ_CHECK(config.step.count() > 0 && config.window.count() % config.step.count() == 0);
  FUZZ_CHECK(config.window / config.step <= 10'000);
  FUZZ_CHECK(config.ingest_threads >= 1 && config.ingest_threads <= 64);
  FUZZ_CHECK(config.max_series >= 1);
  return 0;
}
