#include "collector/app/config.h"

#include <unistd.h>

#include <cctype>
#include <charconv>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "collector/controller/control_mode.h"
#include "common/wire_format.h"

namespace bpftrain::collector::app {
namespace {

using nlohmann::json;

// A setting, applied from either a JSON value or a flag's text. Returns an error fragment
// ("expected ..., got ...") or empty on success.
struct Setting {
  bool is_bool = false;   // flag takes no value; JSON wants true/false
  bool repeated = false;  // flag may repeat; JSON takes a value or an array
  std::function<std::string(CollectorConfig&, const std::string&)> apply;
};

// `v` in double quotes with JSON's escapes, so that an error stays one line whatever the file
// holds (a key or value with a newline in it: found by the config fuzzer).
std::string quoted(const std::string& v) {
  return json(v).dump(-1, ' ', false, json::error_handler_t::replace);
}
std::string got(const std::string& v) { return ", got " + quoted(v); }

// --enable-probe / --disable-probe: one more probe name on `list` (names are checked against
// the probes when the loader starts: collector/loader/probe_service.cc).
Setting probeNames(std::vector<std::string> CollectorConfig::*list) {
  return {false, true, [list](CollectorConfig& c, const std::string& v) -> std::string {
            if (v.empty()) return "expected a probe name (--list-probes names them)" + got(v);
            (c.*list).push_back(v);
            return {};
          }};
}

// --rdma-sources, --rdma-rxe-attach, --rdma-verbs-read: `auto` (the default) or `other`, which
// sets `flag`.
Setting autoOr(const char* other, bool CollectorConfig::*flag) {
  return {false, false, [other, flag](CollectorConfig& c, const std::string& v) -> std::string {
            if (v != "auto" && v != other) return std::string("expected auto or ") + other + got(v);
            c.*flag = v == other;
            return {};
          }};
}

// HOST:PORT, [IPV6]:PORT or NAME:PORT (common/host_port.h); names resolve when used.
std::string hostPort(const std::string& v, PortZero zero, HostPort& out) {
  std::string error;
  std::optional<HostPort> hp = parseHostPort(v, zero, error);
  if (!hp) return error;
  out = *hp;
  return {};
}

template <typename T>
bool parseInt(const std::string& s, T& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size();
}

const std::map<std::string, Setting>& settings() {
  static const std::map<std::string, Setting> table = {
      {"listen",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          return hostPort(v, PortZero::kAllowed, c.listen);
        }}},
      {"metrics",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          return hostPort(v, PortZero::kAllowed, c.metrics);
        }}},
      {"upstream",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          HostPort hp;
          std::string e = hostPort(v, PortZero::kRejected, hp);
          if (e.empty()) c.upstream = hp;
          return e;
        }}},
      {"window",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          auto d = parseDuration(v);
          if (!d || d->count() <= 0) return "expected a duration like 5s or 500ms" + got(v);
          c.window = *d;
          return {};
        }}},
      {"step",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          auto d = parseDuration(v);
          if (!d || *d < std::chrono::milliseconds(1))
            return "expected a duration of at least 1ms like 500ms" + got(v);
          c.step = *d;
          return {};
        }}},
      {"controller_window",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          auto d = parseDuration(v);
          if (!d || d->count() <= 0) return "expected a duration like 1s or 1500ms" + got(v);
          c.controller_window = *d;
          return {};
        }}},
      {"controller_react_window",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          auto d = parseDuration(v);
          if (!d || d->count() <= 0) return "expected a duration like 500ms" + got(v);
          c.controller_react_window = *d;
          return {};
        }}},
      {"controller_period",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          auto d = parseDuration(v);
          if (!d || d->count() < 0)
            return "expected a duration like 100ms (0s: only at steps)" + got(v);
          c.controller_period = *d;
          return {};
        }}},
      {"series_ttl",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          auto d = parseDuration(v);
          if (!d || (d->count() > 0 && *d < std::chrono::seconds(1)))
            return "expected a duration like 10m or 1h (0s: series never expire)" + got(v);
          c.series_ttl = *d;
          return {};
        }}},
      {"no_bpf",
       {true, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          c.no_bpf = v == "true";
          return {};
        }}},
      {"probe_run_stats",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          if (v != "sampled" && v != "on" && v != "off")
            return "expected sampled, on or off" + got(v);
          c.probe_run_stats = v;
          return {};
        }}},
      {"control",
       {true, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          // --control=advise is shorthand for --control --control-mode advise.
          c.control = v != "false";
          if (controller::parseControlMode(v)) c.control_mode = v;
          return {};
        }}},
      {"control_mode",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          if (!controller::parseControlMode(v))
            return "expected " + controller::kControlModeNames.alternatives() + got(v);
          c.control_mode = v;
          return {};
        }}},
      {"trainer",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          return hostPort(v, PortZero::kRejected, c.trainer);
        }}},
      {"job",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          if (!wire::isValidName(v)) return "expected a job name like digits or job-1" + got(v);
          c.job = v;
          return {};
        }}},
      {"user",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          // A user name as useradd takes it; the name is looked up when the collector drops to it.
          bool ok = !v.empty() && v.size() <= 32 && v[0] != '-';
          for (char ch : v)
            ok = ok && (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' ||
                        ch == '.');
          if (!ok) return "expected a user name like bpftrain or nobody (root: stay root)" + got(v);
          c.user = v;
          return {};
        }}},
      {"decisions_log",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          if (v.empty()) return "expected a file path for the controller's JSON-lines log";
          c.decisions_log = v;
          return {};
        }}},
      {"features_log",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          if (v.empty()) return "expected a file path for the controller's features log";
          c.features_log = v;
          return {};
        }}},
      {"features_log_every",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          auto d = parseDuration(v);
          if (!d || d->count() <= 0) return "expected a duration like 2s or 100ms" + got(v);
          c.features_log_every = *d;
          return {};
        }}},
      {"all",
       {true, false,
        [](CollectorConfig& c, const std::string& v) -> std::string {
          c.all_processes = v == "true";
          return {};
        }}},
      {"rdma_sources", autoOr("all", &CollectorConfig::rdma_sources_all)},
      {"rdma_rxe_attach", autoOr("kprobe", &CollectorConfig::rdma_rxe_kprobes)},
      {"rdma_verbs_read", autoOr("nonfaulting", &CollectorConfig::rdma_verbs_nonfaulting)},
      {"discover",
       {true, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           c.discover = v == "true";
                                                           return {};
                                                         }}},
      {"discover_max_jobs",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           size_t n;
                                                           // Each rank takes one of the loader's
                                                           // 255 target slots.
                                                           if (!parseInt(v, n) || n < 1 || n > 255)
                                                             return "expected a job count, 1..255" +
                                                                    got(v);
                                                           c.discover_max_jobs = n;
                                                           return {};
                                                         }}},
      {"list_probes",
       {true, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           c.list_probes = v == "true";
                                                           return {};
                                                         }}},
      {"list_metrics",
       {true, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           c.list_metrics = v == "true";
                                                           return {};
                                                         }}},
      {"policy",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           if (v != "rules" && v != "bandit")
                                                             return "expected rules or bandit" +
                                                                    got(v);
                                                           c.policy = v;
                                                           return {};
                                                         }}},
      {"secret",
       {false, false,
        [](CollectorConfig& c,
           const std::string& v) -> std::
                                     string {
                                       if (access(v.c_str(), R_OK) != 0)
                                         return "cannot read the secret file (create it, e.g. head "
                                                "-c32 /dev/urandom > FILE)" +
                                                got(v);
                                       c.secret_path = v;
                                       return {};
                                     }}},
      {"ingest_threads",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           int n;
                                                           if (!parseInt(v, n) || n < 1 || n > 64)
                                                             return "expected 1..64" + got(v);
                                                           c.ingest_threads = n;
                                                           return {};
                                                         }}},
      {"max_series",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           size_t n;
                                                           if (!parseInt(v, n) || n < 1 ||
                                                               n > 10'000'000)
                                                             return "expected 1..10000000" + got(v);
                                                           c.max_series = n;
                                                           return {};
                                                         }}},
      {"rcvbuf",
       {false, false,
        [](CollectorConfig& c, const std::string& v)
            -> std::
                string {
                  size_t n;
                  if (!parseInt(v, n) || n < 4096 || n > (1u << 30))
                    return "expected a socket buffer size in bytes, 4096..1073741824" + got(v);
                  c.rcvbuf_bytes = n;
                  return {};
                }}},
      {"pid",
       {false, true,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           pid_t p;
                                                           if (!parseInt(v, p) || p <= 0)
                                                             return "expected a process id" +
                                                                    got(v);
                                                           c.pids.push_back(p);
                                                           return {};
                                                         }}},
      {"cgroup",
       {false, true,
        [](CollectorConfig& c,
           const std::string& v) -> std::
                                     string {
                                       if (v.empty() || access(v.c_str(), F_OK) != 0)
                                         return "expected an existing cgroup directory, e.g. "
                                                "/sys/fs/cgroup/train.slice" +
                                                got(v);
                                       c.cgroups.push_back(v);
                                       return {};
                                     }}},
      {"disable_probe", probeNames(&CollectorConfig::disabled_probes)},
      {"enable_probe", probeNames(&CollectorConfig::enabled_probes)},
      {"log_level",
       {false, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           auto l = parseLogLevel(v);
                                                           if (!l)
                                                             return "expected " +
                                                                    kLogLevelNames.alternatives() +
                                                                    got(v);
                                                           c.log_level = *l;
                                                           return {};
                                                         }}},
      {"nccl_control",
       {true, false,
        [](CollectorConfig& c, const std::string& v) -> std::
                                                         string {
                                                           c.nccl_control = v == "true";
                                                           return {};
                                                         }}},
  };
  return table;
}

std::string flagName(const std::string& key) {
  std::string f = "--" + key;
  for (char& ch : f)
    if (ch == '_') ch = '-';
  return f;
}

// JSON scalar as the text a flag would carry, so both paths share one validator.
bool jsonText(const json& v, const Setting& s, std::string& out) {
  if (s.is_bool) {
    if (!v.is_boolean()) return false;
    out = v.get<bool>() ? "true" : "false";
  } else if (v.is_string()) {
    out = v.get<std::string>();
  } else if (v.is_number_integer()) {
    out = std::to_string(v.get<int64_t>());
  } else {
    return false;
  }
  return true;
}

bool applyFile(const std::string& path, CollectorConfig& out, std::string& error) {
  std::ifstream in(path);
  if (!in) {
    error = "--config " + path + ": cannot open the file (check the path and permissions)";
    return false;
  }
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {  // parse_error; out_of_range for a number that overflows
    error = "--config " + path + ": not valid JSON (" + e.what() + ")";
    return false;
  }
  if (!doc.is_object()) {
    error = "--config " + path + ": expected a JSON object like {\"listen\": \"127.0.0.1:9470\"}";
    return false;
  }
  for (const auto& [raw_key, value] : doc.items()) {
    std::string key = raw_key;
    for (char& ch : key)
      if (ch == '-') ch = '_';
    auto it = settings().find(key);
    std::string where = "config key " + quoted(raw_key) + " in " + path + ": ";
    if (it == settings().end() || key == "config") {
      std::string known;  // from the table itself, so that the list cannot fall behind it
      for (const auto& [name, setting] : settings()) known += (known.empty() ? "" : ", ") + name;
      error = where + "unknown key (known: " + known + ")";
      return false;
    }
    const Setting& s = it->second;
    std::vector<json> values;
    if (s.repeated && value.is_array())
      values.assign(value.begin(), value.end());
    else
      values.push_back(value);
    for (const json& v : values) {
      std::string text;
      if (!jsonText(v, s, text)) {
        error = where + (s.is_bool ? "expected true or false" : "expected a string or number") +
                ", got " + v.dump();
        return false;
      }
      if (std::string e = s.apply(out, text); !e.empty()) {
        error = where + e;
        return false;
      }
    }
  }
  return true;
}

}  // namespace

bool isWildcardHost(std::string_view host) {
  return host.empty() || host == "0.0.0.0" || host == "::" || host == "0:0:0:0:0:0:0:0";
}

std::optional<std::chrono::nanoseconds> parseDuration(std::string_view s) {
  int64_t n;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), n);
  if (ec != std::errc() || n < 0) return std::nullopt;
  std::string_view unit(p, size_t(s.data() + s.size() - p));
  int64_t mult;
  if (unit == "ns")
    mult = 1;
  else if (unit == "us")
    mult = 1'000;
  else if (unit == "ms")
    mult = 1'000'000;
  else if (unit == "s")
    mult = 1'000'000'000;
  else if (unit == "m")
    mult = 60'000'000'000;
  else if (unit == "h")
    mult = 3'600'000'000'000;
  else
    return std::nullopt;
  if (n > INT64_MAX / mult) return std::nullopt;
  return std::chrono::nanoseconds(n * mult);
}

bool loadConfig(int argc, const char* const* argv, CollectorConfig& out, std::string& error) {
  out = CollectorConfig{};
  // The file first (wherever --config appears), then the flags over it.
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string path;
    if (a == "--config" && i + 1 < argc)
      path = argv[i + 1];
    else if (a.rfind("--config=", 0) == 0)
      path = a.substr(9);
    else
      continue;
    out.config_path = path;
    if (!applyFile(path, out, error)) return false;
  }
  std::set<std::string> flag_lists_reset;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      out.help = true;
      return true;
    }
    if (a == "--version") {
      out.version = true;
      return true;
    }
    std::string value;
    bool has_value = false;
    if (size_t eq = a.find('='); a.rfind("--", 0) == 0 && eq != std::string::npos) {
      value = a.substr(eq + 1);
      a = a.substr(0, eq);
      has_value = true;
    }
    if (a.rfind("--", 0) != 0) {
      error = "unexpected argument \"" + a + "\" (flags start with --; see --help)";
      return false;
    }
    std::string key = a.substr(2);
    for (char& ch : key)
      if (ch == '-') ch = '_';
    if (key == "config") {
      if (!has_value) ++i;
      if (i >= argc) {
        error = "--config needs a FILE";
        return false;
      }
      continue;
    }
    auto it = settings().find(key);
    if (it == settings().end()) {
      error = "unknown flag " + a + " (see --help)";
      return false;
    }
    const Setting& s = it->second;
    // A repeated flag replaces the file's list rather than appending to it.
    if (s.repeated && flag_lists_reset.insert(key).second) {
      if (key == "pid") out.pids.clear();
      if (key == "cgroup") out.cgroups.clear();
      if (key == "disable_probe") out.disabled_probes.clear();
      if (key == "enable_probe") out.enabled_probes.clear();
    }
    if (s.is_bool) {
      bool mode_value = key == "control" && controller::parseControlMode(value).has_value();
      if (has_value && value != "true" && value != "false" && !mode_value) {
        error = a +
                (key == "control" ? ": expected no value, =act, =advise, =true or =false"
                                  : ": expected no value, or =true / =false") +
                got(value);
        return false;
      }
      if (!has_value) value = "true";
    } else if (!has_value) {
      if (i + 1 >= argc) {
        error = a + " needs a value";
        return false;
      }
      value = argv[++i];
    }
    if (std::string e = s.apply(out, value); !e.empty()) {
      error = flagName(key) + ": " + e;
      return false;
    }
  }
  if (out.step > out.window || out.window.count() % out.step.count() != 0) {
    error =
        "--window/--step: the window must be a whole number of steps (e.g. --window 5s "
        "--step 500ms), got window " +
        std::to_string(out.window.count() / 1'000'000) + "ms, step " +
        std::to_string(out.step.count() / 1'000'000) + "ms";
    return false;
  }
  if (out.window / out.step > 10'000) {
    error = "--window/--step: at most 10000 steps per window";
    return false;
  }
  return true;
}

const char* collectorUsage() {
  return "usage: bpftrain-collector [flags]\n"
         "  --config FILE          JSON file with any of the keys below (flags override it)\n"
         "  --version              print the version and exit\n"
         "  --listen HOST:PORT     UDP ingest for binary frames and StatsD (127.0.0.1:9470; :0 = "
         "any)\n"
         "  --metrics HOST:PORT    Prometheus /metrics (127.0.0.1:9471; :0 = any)\n"
         "  --window 5s --step 500ms   sliding window length and step\n"
         "  --ingest-threads N     UDP sockets/threads on the ingest port (2)\n"
         "  --rcvbuf BYTES         socket receive buffer per ingest socket (33554432)\n"
         "  --max-series N         series cardinality bound (100000); more are rejected and "
         "counted\n"
         "  --series-ttl D         a series with no sample for D leaves the store and /metrics "
         "(10m; 0s: never)\n"
         "  --upstream HOST:PORT   forward window summaries to a parent collector\n"
         "  --no-bpf               do not load BPF probes\n"
         "  --disable-probe NAME   do not attach this probe (repeatable; --list-probes names "
         "them)\n"
         "  --enable-probe NAME    attach a probe that is off by default (repeatable): "
         "thp_faults\n"
         "  --probe-run-stats sampled|on|off   the probes' run time from the kernel's BPF run "
         "statistics, which every BPF program on the host pays for while on: 1 s of every 30 s "
         "(sampled, scaled), always, or never\n"
         "  --pid PID, --cgroup PATH, --all   extra processes for the probes to follow\n"
         "  --rdma-sources auto|all  auto: count each RDMA work request once (rdma_rxe where\n"
         "                         it sees every device a process opened, else rdma_verbs'\n"
         "                         uprobes); all: every source that sees it\n"
         "  --rdma-rxe-attach auto|kprobe  rdma_rxe by fentry where the kernel can (auto), or\n"
         "                         by its kprobes (to compare the two)\n"
         "  --rdma-verbs-read auto|nonfaulting  rdma_verbs reads completions with a sleepable\n"
         "                         program where the kernel loads one (6.0+), or without faulting\n"
         "                         (a failed read counted as lost; to test that path)\n"
         "  --discover             find training ranks (torchrun, mpirun, srun) from their "
         "environment\n"
         "  --discover-max-jobs N  jobs --discover follows at most (32); more are counted\n"
         "  --list-probes          show which probes attach on this machine, then exit\n"
         "  --list-metrics         print every metric bpftrain exports (a markdown table), then "
         "exit\n"
         "  --control[=act|advise] --policy rules|bandit --secret FILE   run the controller\n"
         "  --trainer HOST:PORT    trainer rank 0's control port (127.0.0.1:9472)\n"
         "  --nccl-control         steer NCCL jobs' algorithm and protocol through the tuner\n"
         "                         plugin (--secret, --control-mode, --decisions-log, --job)\n"
         "  --job NAME             job to steer (default: the first job seen)\n"
         "  --decisions-log FILE   controller decisions as JSON lines\n"
         "  --features-log FILE    what the controller saw, a JSON line every 2 s\n"
         "  --features-log-every D how often (2s; at or below --controller-period every look\n"
         "                         between steps too: how a decision's signal built up)\n"
         "  --controller-window D  the window the controller reads (1s; Prometheus keeps "
         "--window)\n"
         "  --controller-period D  between steps, how often it looks for a decisive congestion\n"
         "                         (100ms; 0s: only at steps)\n"
         "  --controller-react-window D  what those looks read (250ms: the step in progress\n"
         "                         once it has run that long, else with the step before)\n"
         "  --user NAME            run as NAME once started, keeping only the capabilities the\n"
         "                         probes still use (default bpftrain if it exists; root: stay)\n"
         "  --log-level debug|info|warn|error\n"
         "SIGHUP reloads --config: upstream and log level apply live, the rest (max series\n"
         "among them) needs a restart and the log says so; SIGTERM stops.\n";
}

}  // namespace bpftrain::collector::app
