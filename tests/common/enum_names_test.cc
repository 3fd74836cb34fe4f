#include "common/enum_names.h"

#include <gtest/gtest.h>

#include <set>

#include "common/training_config.h"
#include "common/wire_format.h"

namespace bpftrain {
namespace {

enum class Colour : uint8_t { kRed = 1, kGreen = 4, kCount };
constexpr auto kColourNames = enumNames<Colour>({{Colour::kRed, "red"}, {Colour::kGreen, "green"}});

static_assert(kColourNames.name(Colour::kGreen) == "green");
static_assert(kColourNames.parse("red") == Colour::kRed);

TEST(EnumNames, NameParseAndAlternatives) {
  EXPECT_EQ(kColourNames.size(), 2u);
  EXPECT_EQ(kColourNames.name(Colour::kRed), "red");
  EXPECT_EQ(kColourNames.name(Colour::kCount), "unknown");
  EXPECT_EQ(kColourNames.name(Colour(9), "?"), "?");
  EXPECT_EQ(kColourNames.parse("green"), Colour::kGreen);
  EXPECT_FALSE(kColourNames.parse("Green"));
  EXPECT_FALSE(kColourNames.parse(""));
  EXPECT_EQ(kColourNames.alternatives(), "red or green");
  EXPECT_EQ(kTopologyNames.alternatives(), "ring, halving-doubling, bcube or hierarchical");
  EXPECT_EQ(kPinModeNames.alternatives(), "none, compact, spread or numa");
}

// Every list round-trips and names each value once: a duplicated name would parse to one value.
template <typename List>
void roundTrips(const List& list) {
  std::set<std::string_view> names;
  for (const auto& v : list) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name;
    EXPECT_EQ(list.parse(v.name), v.value) << v.name;
    EXPECT_EQ(list.name(v.value), v.name);
  }
}

TEST(EnumNames, DeclaredListsRoundTrip) {
  roundTrips(kTopologyNames);
  roundTrips(kPinModeNames);
  roundTrips(wire::kDecodeErrorNames);
  EXPECT_EQ(topologyName(Topology::kHalvingDoubling), "halving-doubling");
  EXPECT_EQ(parsePinMode("numa"), PinMode::kNuma);
  EXPECT_EQ(wire::decodeErrorName(wire::DecodeError::kBadName), "bad_name");
  EXPECT_EQ(wire::decodeErrorName(wire::DecodeError::kCount), "unknown");
}

}  // namespace
}  // namespace bpftrain
