// bpftrain-top: a live terminal view of one training job, read from a collector's /metrics over
// HTTP, so it works wherever that address is reachable (over ssh: run it on the host, or tunnel
// the port). Scrapes every --interval, redraws in place, follows terminal resizes; q quits.
#include <curses.h>
#include <signal.h>
#include <sys/socket.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <string>

#include "collector/top/http_get.h"
#include "collector/top/metrics_text.h"
#include "collector/top/model.h"
#include "collector/top/view.h"
#include "common/host_port.h"

#ifndef BPFTRAIN_VERSION
#define BPFTRAIN_VERSION "unknown"
#endif

namespace bpftrain::top {
namespace {

constexpr const char* kUsage =
    "usage: bpftrain-top [--metrics HOST:PORT] [--job NAME] [--interval SECONDS] [--once]\n"
    "  --metrics HOST:PORT  the collector's /metrics address (default 127.0.0.1:9471)\n"
    "  --job NAME           the training job to show (default: the first the collector knows)\n"
    "  --interval SECONDS   time between scrapes, 0.1 to 60 (default 1)\n"
    "  --once               print one screen (80x40) to stdout and exit: for scripts\n"
    "  --version            print the version\n"
    "keys: q quits; the view follows terminal resizes\n";

struct Options {
  std::string metrics = "127.0.0.1:9471";
  std::string job;
  double interval_s = 1;
  bool once = false;
};

int usageError(const std::string& what) {
  std::fprintf(stderr, "bpftrain-top: %s\n%s", what.c_str(), kUsage);
  return 2;
}

std::string wallClock() {
  std::time_t t = std::time(nullptr);
  std::tm tm{};
  localtime_r(&t, &tm);
  char b[16];
  std::strftime(b, sizeof b, "%H:%M:%S", &tm);
  return b;
}

double monotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// One scrape into the model; returns "" or what failed.
std::string scrape(const SocketAddress& addr, const std::string& host, Model& model,
                   std::chrono::milliseconds timeout) {
  std::string error;
  auto body = httpGet(addr, host, "/metrics", timeout, error);
  if (!body) return error + " (is bpftrain-collector running with this --metrics address?)";
  ParsedMetrics m = parseMetricsText(*body);
  model.update(m.samples, monotonicSeconds());
  if (m.bad_lines > 0) return std::to_string(m.bad_lines) + " unreadable lines in /metrics";
  return "";
}

void paint(const std::vector<std::string>& lines) {
  erase();
  for (int i = 0; i < int(lines.size()) && i < LINES; ++i) {
    if (i == 0 ||
        (!lines[i].empty() && lines[i][0] >= 'A' && lines[i][0] <= 'Z' &&
         lines[i].compare(0, 4, "RANK") != 0 && lines[i].compare(0, 10, "throughput") != 0))
      attron(A_BOLD);
    mvaddnstr(i, 0, lines[i].c_str(), COLS);
    attroff(A_BOLD);
  }
  refresh();
}

int run(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) return nullptr;
      (void)flag;
      return argv[++i];
    };
    if (a == "--help" || a == "-h") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (a == "--version") {
      std::printf("bpftrain-top %s\n", BPFTRAIN_VERSION);
      return 0;
    } else if (a == "--once") {
      o.once = true;
    } else if (a == "--metrics" || a == "--job" || a == "--interval") {
      const char* v = value(a.c_str());
      if (!v) return usageError(a + " needs a value");
      if (a == "--metrics") o.metrics = v;
      if (a == "--job") o.job = v;
      if (a == "--interval") {
        char* end = nullptr;
        o.interval_s = std::strtod(v, &end);
        if (*end != '\0' || !(o.interval_s >= 0.1 && o.interval_s <= 60))
          return usageError("--interval: expected seconds from 0.1 to 60, got \"" + std::string(v) +
                            "\"");
      }
    } else {
      return usageError("unknown argument \"" + a + "\"");
    }
  }
  std::string error;
  auto addr = resolveSetting("--metrics", o.metrics, PortZero::kRejected, SOCK_STREAM, error);
  if (!addr) return usageError(error);

  Model model(o.job);
  Header header;
  header.source = o.metrics;
  header.interval_s = o.interval_s;
  const auto timeout = std::chrono::milliseconds(int(std::max(500.0, o.interval_s * 1000)));

  if (o.once) {
    // Two scrapes a short interval apart, so rates have something to compare.
    header.status = scrape(*addr, o.metrics, model, timeout);
    if (!header.status.empty() && model.view().scrapes == 0) {
      std::fprintf(stderr, "bpftrain-top: %s\n", header.status.c_str());
      return 1;
    }
    struct timespec ts {
      0, 300'000'000
    };
    nanosleep(&ts, nullptr);
    header.status = scrape(*addr, o.metrics, model, timeout);
    header.clock = wallClock();
    for (const std::string& l : renderScreen(model.view(), header, 80, 40))
      std::printf("%s\n", l.c_str());
    return header.status.empty() ? 0 : 1;
  }

  initscr();
  cbreak();
  noecho();
  curs_set(0);
  keypad(stdscr, TRUE);
  timeout(100);  // getch waits at most 100 ms: keys and resizes are seen promptly
  double next = 0;
  for (;;) {
    double now = monotonicSeconds();
    bool redraw = false;
    if (now >= next) {
      header.status = scrape(*addr, o.metrics, model, timeout);
      header.clock = wallClock();
      next = now + o.interval_s;
      redraw = true;
    }
    int ch = getch();
    if (ch == 'q' || ch == 'Q') break;
    if (ch == KEY_RESIZE) redraw = true;  // ncurses has updated LINES and COLS
    if (redraw) paint(renderScreen(model.view(), header, COLS, LINES));
  }
  endwin();
  return 0;
}

}  // namespace
}  // namespace bpftrain::top

int main(int argc, char** argv) { return bpftrain::top::run(argc, argv); }
