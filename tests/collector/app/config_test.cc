#include "collector/app/config.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace bpftrain::collector::app {
namespace {

using namespace std::chrono_literals;

bool load(std::vector<const char*> args, CollectorConfig& c, std::string& err) {
  args.insert(args.begin(), "bpftrain-collector");
  return loadConfig(int(args.size()), args.data(), c, err);
}

TEST(ConfigTest, Defaults) {
  CollectorConfig c;
  std::string err;
  ASSERT_TRUE(load({}, c, err)) << err;
  EXPECT_EQ(c.listen.str(), "127.0.0.1:9470");
  EXPECT_EQ(c.metrics.str(), "127.0.0.1:9471");
  EXPECT_EQ(c.window, 5s);
  EXPECT_EQ(c.step, 500ms);
  EXPECT_FALSE(c.upstream);
}

TEST(ConfigTest, VersionIsAskedForLikeHelp) {
  CollectorConfig c;
  std::string err;
  ASSERT_TRUE(load({"--version", "--bogus"}, c, err)) << err;  // nothing after it is parsed
  EXPECT_TRUE(c.version);
  EXPECT_FALSE(c.help);
}

// A key or a value with a newline in it (the config fuzzer's find): still one error line, the
// text escaped as JSON spells it.
TEST(ConfigTest, ErrorsStayOneLineWhateverTheFileHolds) {
  const std::string path = ::testing::TempDir() + "/config_newline.json";
  for (const std::string& text :
       {std::string(R"({"list\n": "[:olicy"})"), std::string(R"({"window": "5\ns"})")}) {
    std::ofstream(path) << text;
    CollectorConfig c;
    std::string err;
    EXPECT_FALSE(load({"--config", path.c_str()}, c, err)) << text;
    EXPECT_EQ(err.find('\n'), std::string::npos) << err;
    EXPECT_NE(err.find("\\n"), std::string::npos) << err;  // shown as \n
  }
  std::remove(path.c_str());
}

TEST(ConfigTest, EveryFlag) {
  CollectorConfig c;
  std::string err;
  std::string secret = ::testing::TempDir() + "/secret";
  std::ofstream(secret) << "k";
  ASSERT_TRUE(load({"--listen",
                    "0.0.0.0:1",
                    "--metrics=127.0.0.1:0",
                    "--window",
                    "10s",
                    "--step",
                    "250ms",
                    "--no-bpf",
                    "--control",
                    "--policy",
                    "bandit",
                    "--upstream",
                    "10.0.0.1:9470",
                    "--secret",
                    secret.c_str(),
                    "--ingest-threads",
                    "4",
                    "--max-series",
                    "5000",
                    "--pid",
                    "1",
                    "--pid",
                    "2",
                    "--cgroup",
                    "/sys/fs/cgroup",
                    "--all",
                    "--log-level",
                    "debug",
                    "--rcvbuf",
                    "8192",
                    "--disable-probe",
                    "thp_faults",
                    "--disable-probe",
                    "tcp",
                    "--probe-run-stats",
                    "off",
                    "--enable-probe",
                    "thp_faults",
                    "--rdma-rxe-attach",
                    "kprobe",
                    "--rdma-verbs-read",
                    "nonfaulting"},
                   c, err))
      << err;
  EXPECT_EQ(c.listen.str(), "0.0.0.0:1");
  EXPECT_EQ(c.metrics.port, 0);
  EXPECT_EQ(c.window, 10s);
  EXPECT_EQ(c.step, 250ms);
  EXPECT_TRUE(c.no_bpf && c.control && c.all_processes);
  EXPECT_EQ(c.policy, "bandit");
  ASSERT_TRUE(c.upstream);
  EXPECT_EQ(c.upstream->str(), "10.0.0.1:9470");
  EXPECT_EQ(c.secret_path, secret);
  EXPECT_EQ(c.ingest_threads, 4);
  EXPECT_EQ(c.max_series, 5000u);
  EXPECT_EQ(c.pids, (std::vector<pid_t>{1, 2}));
  EXPECT_EQ(c.cgroups, std::vector<std::string>{"/sys/fs/cgroup"});
  EXPECT_EQ(c.log_level, LogLevel::kDebug);
  EXPECT_EQ(c.rcvbuf_bytes, 8192u);
  EXPECT_EQ(c.disabled_probes, (std::vector<std::string>{"thp_faults", "tcp"}));
  EXPECT_EQ(c.probe_run_stats, "off");
  EXPECT_EQ(c.enabled_probes, std::vector<std::string>{"thp_faults"});
  EXPECT_TRUE(c.rdma_rxe_kprobes && c.rdma_verbs_nonfaulting);
  EXPECT_FALSE(load({"--rdma-verbs-read", "never"}, c, err));
  EXPECT_NE(err.find("expected auto or nonfaulting"), std::string::npos) << err;
  EXPECT_FALSE(load({"--probe-run-stats", "sometimes"}, c, err));
  EXPECT_NE(err.find("expected sampled, on or off"), std::string::npos) << err;
}

TEST(ConfigTest, FileThenFlagsOverride) {
  std::string path = ::testing::TempDir() + "/cfg.json";
  std::ofstream(path) << R"({"window": "10s", "step": "1s", "pid": [3, 4], "no-bpf": true,
                             "ingest_threads": 3})";
  CollectorConfig c;
  std::string err;
  ASSERT_TRUE(load({"--config", path.c_str(), "--step", "2s", "--pid", "9"}, c, err)) << err;
  EXPECT_EQ(c.window, 10s);
  EXPECT_EQ(c.step, 2s);
  EXPECT_TRUE(c.no_bpf);
  EXPECT_EQ(c.ingest_threads, 3);
  EXPECT_EQ(c.pids, std::vector<pid_t>{9});  // a repeated flag replaces the file's list
}

TEST(ConfigTest, ErrorsNameTheKey) {
  std::string path = ::testing::TempDir() + "/bad.json";
  CollectorConfig c;
  std::string err;
  std::ofstream(path) << R"({"max_series": "lots"})";
  EXPECT_FALSE(load({"--config", path.c_str()}, c, err));
  EXPECT_NE(err.find("\"max_series\""), std::string::npos) << err;
  // Paths under a directory this test never creates (a fixed /nonexistent can exist).
  std::string missing = ::testing::TempDir() + "/bpftrain-config-test-missing/x";
  EXPECT_FALSE(load({"--config", missing.c_str()}, c, err));
  EXPECT_NE(err.find("--config"), std::string::npos) << err;
  EXPECT_FALSE(load({"--upstream", "10.0.0.1:0"}, c, err));
  EXPECT_NE(err.find("--upstream"), std::string::npos) << err;
  EXPECT_FALSE(load({"--secret", missing.c_str()}, c, err));
  EXPECT_NE(err.find("--secret"), std::string::npos) << err;
  EXPECT_FALSE(load({"--no-bpf=maybe"}, c, err));
  EXPECT_NE(err.find("--no-bpf"), std::string::npos) << err;
  EXPECT_FALSE(load({"--metrics"}, c, err));
  EXPECT_NE(err.find("--metrics needs a value"), std::string::npos) << err;
}

TEST(ConfigTest, SeriesTtl) {
  CollectorConfig c;
  std::string err;
  ASSERT_TRUE(load({}, c, err)) << err;
  EXPECT_EQ(c.series_ttl, 10min);
  ASSERT_TRUE(load({"--series-ttl", "1h"}, c, err)) << err;
  EXPECT_EQ(c.series_ttl, 1h);
  ASSERT_TRUE(load({"--series-ttl=0s"}, c, err)) << err;
  EXPECT_EQ(c.series_ttl, 0s);  // never
  std::string path = ::testing::TempDir() + "/ttl.json";
  std::ofstream(path) << R"({"series_ttl": "30s"})";
  ASSERT_TRUE(load({"--config", path.c_str()}, c, err)) << err;
  EXPECT_EQ(c.series_ttl, 30s);
  std::ofstream(path) << R"({"series_ttl": "10ms"})";  // shorter than a scan makes sense
  EXPECT_FALSE(load({"--config", path.c_str()}, c, err));
  EXPECT_NE(err.find("\"series_ttl\""), std::string::npos) << err;
  EXPECT_FALSE(load({"--series-ttl", "soon"}, c, err));
  EXPECT_NE(err.find("--series-ttl"), std::string::npos) << err;
  std::remove(path.c_str());
}

TEST(ConfigTest, ListenersDefaultToLoopbackAndWildcardsAreKnown) {
  CollectorConfig c;
  std::string err;
  ASSERT_TRUE(load({}, c, err)) << err;
  for (const HostPort* hp : {&c.listen, &c.metrics, &c.trainer}) {
    EXPECT_EQ(hp->host, "127.0.0.1");
    EXPECT_FALSE(isWildcardHost(hp->host));
  }
  EXPECT_TRUE(isWildcardHost("0.0.0.0"));
  EXPECT_TRUE(isWildcardHost("::"));
  EXPECT_FALSE(isWildcardHost("::1"));
  EXPECT_FALSE(isWildcardHost("10.0.0.1"));
}

TEST(ConfigTest, Durations) {
  EXPECT_EQ(parseDuration("5s"), 5s);
  EXPECT_EQ(parseDuration("500ms"), 500ms);
  EXPECT_EQ(parseDuration("2m"), 120s);
  EXPECT_EQ(parseDuration("250us"), 250us);
  EXPECT_EQ(parseDuration("1h"), 3600s);
  EXPECT_FALSE(parseDuration("5"));
  EXPECT_FALSE(parseDuration("s"));
  EXPECT_FALSE(parseDuration("-1s"));
  EXPECT_FALSE(parseDuration("1.5s"));
}

}  // namespace
}  // namespace bpftrain::collector::app
