#include "collector/ingest/statsd.h"

#include <gtest/gtest.h>

#include <charconv>
#include <random>
#include <string>
#include <vector>

#include "collector/ingest/key_table.h"

namespace bpftrain::collector::ingest {
namespace {

StatsdLine parseOk(std::string_view s) {
  StatsdLine l;
  auto err = parseStatsdLine(s, l);
  EXPECT_FALSE(err.has_value()) << s << " -> " << decodeReasonName(*err);
  return l;
}

DecodeReason parseErr(std::string_view s) {
  StatsdLine l;
  auto err = parseStatsdLine(s, l);
  EXPECT_TRUE(err.has_value()) << s;
  return err.value_or(DecodeReason::kCount);
}

TEST(StatsdParse, AllTypes) {
  StatsdLine c = parseOk("requests:3|c");
  EXPECT_EQ(c.name, "requests");
  EXPECT_EQ(c.type, StatsdType::kCounter);
  EXPECT_EQ(c.value, 3);
  EXPECT_EQ(parseOk("temp:-4.5|g").type, StatsdType::kGauge);
  EXPECT_EQ(parseOk("lat:12.5|ms").type, StatsdType::kTimerMs);
  EXPECT_EQ(parseOk("size:100|h").type, StatsdType::kHistogram);
  EXPECT_EQ(parseOk("size:100|d").type, StatsdType::kHistogram);
  EXPECT_EQ(parseOk("x:1e3|g").value, 1000);
}

TEST(StatsdParse, RelativeGauges) {
  EXPECT_TRUE(parseOk("g:+5|g").relative);
  EXPECT_TRUE(parseOk("g:-5|g").relative);
  EXPECT_EQ(parseOk("g:-5|g").value, -5);
  EXPECT_FALSE(parseOk("g:5|g").relative);
  EXPECT_FALSE(parseOk("t:-5|ms").relative);
}

TEST(StatsdParse, SampleRateAndTags) {
  StatsdLine l = parseOk("a.b:2|c|@0.25|#env:prod,host:h-1");
  EXPECT_DOUBLE_EQ(l.sample_rate, 0.25);
  ASSERT_EQ(l.tag_count, 2u);
  EXPECT_EQ(l.tags[0].name, "env");
  EXPECT_EQ(l.tags[0].value, "prod");
  EXPECT_EQ(l.tags[1].name, "host");
  EXPECT_EQ(l.tags[1].value, "h-1");
  EXPECT_EQ(l.tags_raw, "env:prod,host:h-1");
  // Sections in either order, tag values may hold ':'.
  StatsdLine m = parseOk("a:2|ms|#url:http://x|@0.5");
  EXPECT_DOUBLE_EQ(m.sample_rate, 0.5);
  ASSERT_EQ(m.tag_count, 1u);
  EXPECT_EQ(m.tags[0].value, "http://x");
  EXPECT_EQ(parseOk("a:1|c\r").value, 1);
}

TEST(StatsdParse, Malformed) {
  EXPECT_EQ(parseErr("novalue"), DecodeReason::kBadLine);
  EXPECT_EQ(parseErr(":1|c"), DecodeReason::kBadLine);
  EXPECT_EQ(parseErr("a:1"), DecodeReason::kBadLine);
  EXPECT_EQ(parseErr("a:1|q"), DecodeReason::kBadType);
  EXPECT_EQ(parseErr("a:1|"), DecodeReason::kBadType);
  EXPECT_EQ(parseErr("a:x|c"), DecodeReason::kBadValue);
  EXPECT_EQ(parseErr("a:|c"), DecodeReason::kBadValue);
  EXPECT_EQ(parseErr("a:1.5.3|g"), DecodeReason::kBadValue);
  // A lone sign: nothing after it to read (ASan found the read past the end in fuzz.statsd).
  EXPECT_EQ(parseErr("a:+|g"), DecodeReason::kBadValue);
  EXPECT_EQ(parseErr("a:-|g"), DecodeReason::kBadValue);
  EXPECT_EQ(parseErr("a:-1|c"), DecodeReason::kBadValue);
  EXPECT_EQ(parseErr("a:nan|g"), DecodeReason::kNonFinite);
  EXPECT_EQ(parseErr("a:inf|ms"), DecodeReason::kNonFinite);
  EXPECT_EQ(parseErr("a:1e999|g"), DecodeReason::kBadValue);  // out of range for a double
  EXPECT_EQ(parseErr("a:1|c|@0"), DecodeReason::kBadSampleRate);
  EXPECT_EQ(parseErr("a:1|c|@1.5"), DecodeReason::kBadSampleRate);
  EXPECT_EQ(parseErr("a:1|c|@x"), DecodeReason::kBadSampleRate);
  EXPECT_EQ(parseErr("a:1|c|#k:"), DecodeReason::kBadTag);
  EXPECT_EQ(parseErr("a:1|c|#:v"), DecodeReason::kBadTag);
  EXPECT_EQ(parseErr("a:1|c|zzz"), DecodeReason::kBadLine);
  EXPECT_EQ(parseErr(std::string(300, 'n') + ":1|c"), DecodeReason::kOversized);
}

TEST(StatsdParse, LabelFloodBounded) {
  std::string line = "a:1|c|#";
  for (size_t i = 0; i <= kMaxStatsdTags; ++i)
    line.append("k").append(std::to_string(i)).append(":v,");
  EXPECT_EQ(parseErr(line), DecodeReason::kLabelFlood);
  EXPECT_EQ(parseErr(std::string("a:1|c|#k:").append(kMaxStatsdTagValueLength + 1, 'v')),
            DecodeReason::kLabelFlood);
}

// Sets (|s) take any text as a member; gauges with a sign are deltas.
TEST(StatsdParse, SetsTakeAnyMember) {
  StatsdLine s = parseOk("users:alice@example.com|s|#env:prod");
  EXPECT_EQ(s.type, StatsdType::kSet);
  EXPECT_EQ(s.set_value, "alice@example.com");
  EXPECT_EQ(parseOk("u:-12|s").set_value, "-12");
  EXPECT_FALSE(parseOk("u:+3|s").relative);
  EXPECT_EQ(parseErr("u:|s"), DecodeReason::kBadValue);
}

TEST(StatsdParse, DogStatsdContainerAndTimestamp) {
  StatsdLine l = parseOk("page.views:1|c|#env:prod|c:83c0a99c0a54c0c1|T1656581400");
  EXPECT_EQ(l.container, "83c0a99c0a54c0c1");
  ASSERT_EQ(l.tag_count, 2u);
  EXPECT_EQ(l.tags[1].name, "container_id");
  EXPECT_EQ(l.tags[1].value, "83c0a99c0a54c0c1");
  EXPECT_EQ(parseOk("a:1|g|T1").tag_count, 0u);
  EXPECT_EQ(parseOk("a:1|g|#k:v|e:it-false,cn-x|card:low").tag_count, 1u);
  EXPECT_EQ(parseErr("a:1|c|c:"), DecodeReason::kBadLine);
  EXPECT_EQ(parseErr("a:1|c|T"), DecodeReason::kBadLine);
  EXPECT_EQ(parseErr("a:1|c|T12x"), DecodeReason::kBadLine);
}

TEST(StatsdParse, EventsAndServiceChecksAreIgnoredNotErrors) {
  EXPECT_EQ(parseOk("_e{5,4}:title|text|#env:prod").ignored, IgnoredReason::kEvent);
  EXPECT_EQ(parseOk("_sc|db.up|0|#env:prod|m:ok").ignored, IgnoredReason::kServiceCheck);
  EXPECT_EQ(parseOk("a:1|c").ignored, IgnoredReason::kNone);
}

TEST(StatsdParse, ValuelessTagsDroppedAndCounted) {
  StatsdLine l = parseOk("a:1|c|#canary,env:prod,blue");
  ASSERT_EQ(l.tag_count, 1u);
  EXPECT_EQ(l.tags[0].name, "env");
  EXPECT_EQ(l.valueless_tags, 2u);
  EXPECT_EQ(l.tags_raw, "canary,env:prod,blue");
}

TEST(StatsdParse, TagsInTheNameLibratoInfluxSignalfx) {
  StatsdLine lib = parseOk("api.req#env=prod,host=h1:1|c");
  EXPECT_EQ(lib.name, "api.req");
  EXPECT_EQ(lib.key_name, "api.req#env=prod,host=h1");
  ASSERT_EQ(lib.tag_count, 2u);
  EXPECT_EQ(lib.tags[0].name, "env");
  EXPECT_EQ(lib.tags[1].value, "h1");
  StatsdLine inf = parseOk("cpu,host=a,region=eu:0.5|g");
  EXPECT_EQ(inf.name, "cpu");
  ASSERT_EQ(inf.tag_count, 2u);
  EXPECT_EQ(inf.tags[1].name, "region");
  StatsdLine sfx = parseOk("api[env=prod,dc=x].latency:12|ms");
  EXPECT_EQ(sfx.name, "api.latency");
  ASSERT_EQ(sfx.tag_count, 2u);
  EXPECT_EQ(sfx.tags[1].value, "x");
  EXPECT_EQ(parseOk("a[k=v]:1|c").name, "a");
  EXPECT_EQ(parseOk("a,canary:1|c").valueless_tags, 1u);
  EXPECT_EQ(parseErr("a[k=v:1|c"), DecodeReason::kBadTag);
  EXPECT_EQ(parseErr("a]k=v[:1|c"), DecodeReason::kBadTag);
  EXPECT_EQ(parseErr("a,k=:1|c"), DecodeReason::kBadTag);
  EXPECT_EQ(parseErr("a,k=v:1|c|#x:y"), DecodeReason::kMixedTags);  // as statsd_exporter
  EXPECT_EQ(parseErr(",k=v:1|c"), DecodeReason::kBadLine);          // no name left
}

std::string mapped(std::string_view raw) {
  char buf[256];
  size_t n = mapStatsdName(raw, buf, sizeof buf);
  return std::string(buf, n);
}

TEST(StatsdName, StatsdExporterMapping) {
  EXPECT_EQ(mapped("api.request-count"), "api_request_count");
  EXPECT_EQ(mapped("Foo_Bar9"), "Foo_Bar9");
  EXPECT_EQ(mapped("9lives"), "_9lives");
  EXPECT_EQ(mapped("bad name"), "");  // invalid characters: rejected and counted
  EXPECT_EQ(mapped("bad/name"), "");
  EXPECT_EQ(mapped("caf\xc3\xa9"), "");
  EXPECT_EQ(mapped(""), "");
}

// The parser's fast path for plain decimals must give bit-identical results to from_chars.
TEST(StatsdParse, DecimalFastPathMatchesFromChars) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 200000; ++i) {
    std::string v = std::to_string(rng() % 1000000000000000ull);
    int frac = int(rng() % 8);
    if (frac > 0 && size_t(frac) < v.size()) v.insert(v.size() - size_t(frac), 1, '.');
    if (rng() % 2) v = "-" + v;
    StatsdLine l;
    ASSERT_FALSE(parseStatsdLine("x:" + v + "|g", l).has_value()) << v;
    double want;
    std::from_chars(v.data(), v.data() + v.size(), want);
    ASSERT_EQ(l.value, want) << v;
  }
  StatsdLine l;
  EXPECT_EQ(parseStatsdLine("x:--1|g", l), DecodeReason::kBadValue);
  EXPECT_EQ(parseStatsdLine("x:+-1|g", l), DecodeReason::kBadValue);
  EXPECT_EQ(parseStatsdLine("x:.|g", l), DecodeReason::kBadValue);
  ASSERT_FALSE(parseStatsdLine("x:.5|g", l).has_value());
  EXPECT_EQ(l.value, 0.5);
  ASSERT_FALSE(parseStatsdLine("x:1234567890123456789|g", l).has_value());  // slow path
  EXPECT_EQ(l.value, 1234567890123456789.0);
}

TEST(KeyTableTest, FindsEveryKeyAcrossGrowthAndClear) {
  KeyTable<int> t(16);
  std::vector<std::string> keys;
  for (int i = 0; i < 5000; ++i)
    keys.push_back("0|key." + std::to_string(i) + "|tag:" + std::to_string(i % 7));
  for (int i = 0; i < 5000; ++i) {
    ASSERT_EQ(t.find(keys[i]), nullptr);
    t.insert(keys[i], hashKey(keys[i]), i);
  }
  EXPECT_EQ(t.size(), 5000u);
  for (int i = 0; i < 5000; ++i) {
    int* v = t.find(keys[i]);
    ASSERT_NE(v, nullptr) << keys[i];
    EXPECT_EQ(*v, i);
  }
  EXPECT_EQ(t.find("0|key.5000|tag:0"), nullptr);
  t.clear();
  EXPECT_EQ(t.find(keys[0]), nullptr);
  EXPECT_EQ(t.size(), 0u);
}

}  // namespace
}  // namespace bpftrain::collector::ingest
