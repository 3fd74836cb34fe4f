// bpftrain-top as a user runs it: in a terminal (a detached tmux session), against a real
// collector that is fed rank frames while the test watches. The screen is captured and checked,
// checked again after it refreshed in place, after a resize, and the program quits on `q`.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <sstream>
#include <thread>

#include "common/wire_format.h"
#include "tests/support/child_process.h"
#include "tests/support/collector_process.h"
#include "tests/support/requirements.h"

namespace bpftrain {
namespace {

using namespace std::chrono_literals;
using testing::ChildProcess;

// Two ranks of job "toptest": hellos, then samples every 50 ms (step grows each time).
class Feeder {
 public:
  explicit Feeder(int port) : port_(port), thread_([this] { run(); }) {}
  ~Feeder() {
    stop_ = true;
    thread_.join();
  }

 private:
  void run() {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_port = htons(uint16_t(port_));
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    auto send = [&](const std::vector<uint8_t>& b) {
      sendto(fd, b.data(), b.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to);
    };
    uint32_t seq[2] = {0, 0};
    for (int step = 1; !stop_; ++step) {
      for (uint32_t r = 0; r < 2; ++r) {
        std::vector<uint8_t> buf(wire::kMaxFrameSize);
        if (step % 20 == 1) {
          uint32_t tids[] = {100 + r};
          wire::Hello h{"toptest", "node-a", r, 2, 100 + r, tids};
          buf.resize(wire::encodeHello(buf, 40 + r, seq[r]++, h));
          send(buf);
          buf.assign(wire::kMaxFrameSize, 0);
        }
        using M = wire::MetricId;
        using T = wire::SampleType;
        std::vector<wire::SampleRecord> recs = {
            {M::kSamplesPerSecond, T::kGauge, 0, 0, 1000.0 + 100 * r},
            {M::kStepSeconds, T::kTimer, 0, 0, 0.02 + 0.01 * r},
            {M::kAllreduceSeconds, T::kTimer, 0, 0, 0.005},
            {M::kAllreduceBusbwBytesPerSecond, T::kGauge, 0, 0, 2.5e9},
            {M::kTopology, T::kGauge, 0, 0, 2},  // bcube
            {M::kPinning, T::kGauge, 0, 0, 1},   // compact
            {M::kConfigEpoch, T::kGauge, 0, 0, 3},
            {M::kStep, T::kGauge, 0, 0, double(step)},
        };
        buf.resize(wire::encodeSamples(buf, 40 + r, seq[r]++, 0, recs));
        send(buf);
      }
      std::this_thread::sleep_for(50ms);
    }
    close(fd);
  }

  int port_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

struct Tmux {
  std::string socket = "bpftrain-top-test-" + std::to_string(getpid());
  ~Tmux() { run({"kill-server"}); }
  int run(std::vector<std::string> args, std::string* out = nullptr) const {
    args.insert(args.begin(), {"/usr/bin/tmux", "-L", socket});
    ChildProcess p(args);
    int rc = p.exitCode(10s);
    if (out) *out = p.out;
    return rc;
  }
  std::string capture() const {
    std::string out;
    run({"capture-pane", "-p", "-t", "top"}, &out);
    return out;
  }
  // Captures until pred holds or the deadline passes; returns the last capture.
  std::string captureUntil(const std::function<bool(const std::string&)>& pred,
                           std::chrono::seconds limit = 15s) const {
    auto deadline = std::chrono::steady_clock::now() + limit;
    std::string s = capture();
    while (!pred(s) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(100ms);
      s = capture();
    }
    return s;
  }
};

// The STEP column of rank `rank`'s row (the last field), or -1.
long stepOf(const std::string& screen, const std::string& rank) {
  std::istringstream in(screen);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(rank + " ", 0) != 0) continue;
    size_t end = line.find_last_not_of(' ');
    size_t start = line.find_last_of(' ', end);
    return std::stol(line.substr(start + 1, end - start));
  }
  return -1;
}

size_t widest(const std::string& screen) {
  std::istringstream in(screen);
  size_t w = 0;
  for (std::string line; std::getline(in, line);) {
    size_t e = line.find_last_not_of(' ');
    if (e != std::string::npos) w = std::max(w, e + 1);
  }
  return w;
}

TEST(TopTmux, ShowsTheJobRefreshesResizesAndQuits) {
  if (::access("/usr/bin/tmux", X_OK) != 0) GTEST_FAIL() << "/usr/bin/tmux: run tools/setup";
  testing::CollectorProcess col({"--no-bpf", "--listen", "127.0.0.1:0", "--metrics", "127.0.0.1:0",
                                 "--window", "10s", "--step", "500ms"},
                                20s);
  ASSERT_GT(col.udp_port, 0);
  Feeder feed(col.udp_port);
  Tmux tmux;
  const std::string cmd = testing::buildPath("collector/top/bpftrain-top") +
                          " --metrics 127.0.0.1:" + std::to_string(col.metrics_port) +
                          " --interval 0.2";
  ASSERT_EQ(tmux.run({"new-session", "-d", "-s", "top", "-x", "120", "-y", "40", cmd}), 0);

  std::string s = tmux.captureUntil([](const std::string& s) {
    return s.find("job toptest") != std::string::npos && stepOf(s, "1") > 0 &&
           s.find("topology bcube") != std::string::npos;
  });
  EXPECT_NE(s.find("job toptest"), std::string::npos) << s;
  EXPECT_NE(s.find("throughput 2100 samples/s   ranks 2   topology bcube   pinning compact"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("20.00ms"), std::string::npos) << s;  // rank 0's step time
  EXPECT_NE(s.find("2.50GB"), std::string::npos) << s;   // bus bandwidth
  EXPECT_NE(s.find("COLLECTOR  ingest"), std::string::npos) << s;
  EXPECT_NE(s.find("DECISIONS  none yet"), std::string::npos) << s;
  EXPECT_NE(s.find("DIAGNOSIS  - (no controller diagnosis"), std::string::npos) << s;

  // Refreshing in place: the step column grows while the screen stays one screen.
  long first = stepOf(s, "0");
  s = tmux.captureUntil([&](const std::string& s) { return stepOf(s, "0") > first + 5; });
  EXPECT_GT(stepOf(s, "0"), first + 5) << s;

  // Resize: the view is laid out again for 60x20.
  ASSERT_EQ(tmux.run({"resize-window", "-t", "top", "-x", "60", "-y", "20"}), 0);
  s = tmux.captureUntil([](const std::string& s) {
    return widest(s) <= 60 && s.find("job toptest") != std::string::npos &&
           std::count(s.begin(), s.end(), '\n') <= 20;
  });
  EXPECT_LE(widest(s), 60u) << s;
  EXPECT_NE(s.find("RANK"), std::string::npos) << s;
  EXPECT_NE(s.find("COLLECTOR"), std::string::npos) << s;

  // q quits: the session (whose only command is bpftrain-top) ends.
  ASSERT_EQ(tmux.run({"send-keys", "-t", "top", "q"}), 0);
  auto deadline = std::chrono::steady_clock::now() + 10s;
  while (tmux.run({"has-session", "-t", "top"}) == 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(100ms);
  EXPECT_NE(tmux.run({"has-session", "-t", "top"}), 0) << "bpftrain-top did not quit on q";
}

}  // namespace
}  // namespace bpftrain
