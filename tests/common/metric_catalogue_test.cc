// The metric catalogue is the one place metric names live: its entries must be valid Prometheus
// names and labels, and the README's metrics table must be exactly what it renders.
#include "common/metric_catalogue.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "tests/support/catalogue_check.h"

namespace bpftrain::metrics {
namespace {

bool validName(std::string_view s) {
  if (s.empty() || std::isdigit(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
  return true;
}

TEST(MetricCatalogue, EntriesAreValidUniqueAndDocumented) {
  std::set<std::string_view> names;
  ASSERT_FALSE(all().empty());
  for (const MetricDef* def : all()) {
    SCOPED_TRACE(std::string(def->name));
    EXPECT_TRUE(def->name.starts_with("bpftrain_"));
    EXPECT_TRUE(validName(def->name));
    // The exporter appends _total to counters; a stored name that has it already would be
    // exported under a name that differs from the catalogue's.
    EXPECT_FALSE(def->name.ends_with("_total"));
    EXPECT_TRUE(names.insert(def->name).second) << "declared twice";
    EXPECT_FALSE(def->unit.empty());
    EXPECT_FALSE(def->source.empty());
    EXPECT_GT(def->help.size(), 10u);
    std::istringstream labels{std::string(def->labels)};
    std::set<std::string> seen;
    for (std::string label; labels >> label;) {
      EXPECT_TRUE(validName(label)) << label;
      EXPECT_NE(label, "pid") << "no series carries a pid";
      EXPECT_NE(label, "tid") << "no series carries a tid";
      EXPECT_TRUE(seen.insert(label).second) << label << " listed twice";
    }
  }
}

TEST(MetricCatalogue, FindsStoredAndExportedNames) {
  EXPECT_EQ(find("bpftrain_migrations"), &kMigrations);
  EXPECT_EQ(find("bpftrain_migrations_total"), &kMigrations);
  EXPECT_EQ(find("bpftrain_step_seconds"), &kStepSeconds);
  EXPECT_EQ(find("my_app_requests"), nullptr);
  EXPECT_EQ(promName(kMigrations), "bpftrain_migrations_total");
  EXPECT_EQ(promName(kStepSeconds), "bpftrain_step_seconds");
}

// The README's table between the markers is the catalogue rendered: a metric added, renamed or
// re-described in one place and not the other fails here, with the block to paste.
TEST(MetricCatalogue, ReadmeTableIsTheCatalogue) {
  const char* source_dir = std::getenv("BPFTRAIN_SOURCE_DIR");
  ASSERT_NE(source_dir, nullptr) << "run through ctest (it sets BPFTRAIN_SOURCE_DIR)";
  std::ifstream in(std::string(source_dir) + "/README.md");
  ASSERT_TRUE(in) << "cannot read README.md";
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string readme = buffer.str();
  constexpr std::string_view kBegin =
      "<!-- metrics-table:begin (tests/common/metric_catalogue_test.cc) -->\n";
  constexpr std::string_view kEnd = "<!-- metrics-table:end -->";
  const size_t begin = readme.find(kBegin);
  const size_t end = readme.find(kEnd);
  ASSERT_NE(begin, std::string::npos) << "README.md lacks the line " << kBegin;
  ASSERT_NE(end, std::string::npos) << "README.md lacks the line " << kEnd;
  ASSERT_LT(begin, end);
  const std::string table = readme.substr(begin + kBegin.size(), end - begin - kBegin.size());
  EXPECT_EQ(table, markdownTable())
      << "README.md's metrics table differs from common/metric_catalogue.h; replace the lines "
         "between the markers with:\n"
      << markdownTable();
}

// The scrape check the e2e tests use: it must flag a missing label, an undeclared metric and a
// counter without _total, and accept what the catalogue declares.
TEST(MetricCatalogue, ScrapeCheckFlagsWhatDisagrees) {
  using testing::catalogueMismatches;
  EXPECT_TRUE(
      catalogueMismatches({{"bpftrain_migrations_total{job=\"j\",rank=\"0\",scope=\"cpu\"}", 1},
                           {"bpftrain_step_seconds{job=\"j\",quantile=\"0.5\",rank=\"0\"}", 1},
                           {"bpftrain_step_seconds_count{job=\"j\",rank=\"0\"}", 1},
                           {"bpftrain_collector_series", 3},
                           {"my_own_metric_total", 1}})
          .empty());
  EXPECT_EQ(catalogueMismatches({{"bpftrain_migrations_total{job=\"j\",rank=\"0\"}", 1}}).size(),
            1u);
  EXPECT_EQ(catalogueMismatches({{"bpftrain_not_declared", 1}}).size(), 1u);
  EXPECT_EQ(
      catalogueMismatches({{"bpftrain_migrations{job=\"j\",rank=\"0\",scope=\"cpu\"}", 1}}).size(),
      1u);
  EXPECT_EQ(catalogueMismatches({{"bpftrain_loss_sum{job=\"j\",rank=\"0\"}", 1}}).size(), 1u);
  // Histograms of distributions with bucket bounds: buckets carry `le`, _sum and _count do not.
  EXPECT_TRUE(catalogueMismatches(
                  {{"bpftrain_step_seconds_hist_bucket{job=\"j\",le=\"0.001\",rank=\"0\"}", 1},
                   {"bpftrain_step_seconds_hist_sum{job=\"j\",rank=\"0\"}", 1},
                   {"bpftrain_step_seconds_hist_count{job=\"j\",rank=\"0\"}", 1}})
                  .empty());
  EXPECT_EQ(
      catalogueMismatches({{"bpftrain_step_seconds_hist_count{job=\"j\",le=\"1\",rank=\"0\"}", 1}})
          .size(),
      1u);
  EXPECT_EQ(catalogueMismatches({{"bpftrain_loss_hist_count{job=\"j\",rank=\"0\"}", 1}}).size(),
            1u);
}
// Every distribution the catalogue declares has histogram bounds, ascending; nothing else has.
TEST(MetricCatalogue, DistributionsHaveAscendingBucketBounds) {
  for (const MetricDef* def : all()) {
    if (def->kind != Kind::kDistribution) {
      EXPECT_TRUE(def->buckets.empty()) << def->name;
      continue;
    }
    ASSERT_FALSE(def->buckets.empty()) << def->name << ": give it bucket bounds";
    for (size_t i = 1; i < def->buckets.size(); ++i)
      EXPECT_LT(def->buckets[i - 1], def->buckets[i]) << def->name;
  }
}

}  // namespace
}  // namespace bpftrain::metrics
