// The link book: a peer address maps to the node whose ranks use it; loopback and a socket's own
// address are the same host; unknown peers and nodes past the bound are labelled, never unbounded.
#include "collector/loader/link_book.h"

#include <gtest/gtest.h>

#include <string>

namespace bpftrain::collector::loader {
namespace {

LinkAddress v4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  uint8_t raw[16] = {a, b, c, d};
  return LinkAddress::of(2, raw);
}

TEST(LinkBook, LoopbackAndOwnAddressAreTheSameHost) {
  LinkBook book;
  const LinkAddress self = v4(10, 0, 0, 1);
  EXPECT_EQ(book.classify(self, self, "node0").link, LinkClass::kSameHost);
  EXPECT_EQ(book.classify(self, v4(127, 0, 0, 1), "node0").link, LinkClass::kSameHost);
  EXPECT_EQ(book.classify(self, self, "node0").node, "node0");
}

TEST(LinkBook, PeerAddressMapsToTheNodeThatUsesIt) {
  LinkBook book;
  const LinkAddress a = v4(10, 0, 0, 1), b = v4(10, 0, 0, 2), c = v4(10, 0, 0, 3);
  book.learn(a, "node0");
  book.learn(b, "node1");
  LinkBook::Peer p = book.classify(a, b, "node0");
  EXPECT_EQ(p.link, LinkClass::kOtherHost);
  EXPECT_EQ(p.node, "node1");
  // A second address of the rank's own node (another interface) is still the same host.
  book.learn(c, "node0");
  EXPECT_EQ(book.classify(a, c, "node0").link, LinkClass::kSameHost);
  // Never seen as a rank's own address: another host, which one unknown.
  LinkBook::Peer u = book.classify(a, v4(192, 168, 1, 9), "node0");
  EXPECT_EQ(u.link, LinkClass::kOtherHost);
  EXPECT_EQ(u.node, "unknown");
  EXPECT_NE(u.id, p.id);
}

TEST(LinkBook, V4MappedV6IsTheSameAddress) {
  uint8_t mapped[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2};
  EXPECT_EQ(LinkAddress::of(10, mapped), v4(10, 0, 0, 2));
  uint8_t one[16] = {};
  one[15] = 1;
  EXPECT_TRUE(LinkAddress::of(10, one).loopback());
}

TEST(LinkBook, NodesPastTheBoundShareOneLabel) {
  LinkBook book;
  const LinkAddress self = v4(10, 1, 0, 0);
  book.learn(self, "me");
  for (int i = 0; i < 40; ++i) book.learn(v4(10, 2, 0, uint8_t(i)), "n" + std::to_string(i));
  EXPECT_GT(book.overflow(), 0u);
  EXPECT_EQ(book.classify(self, v4(10, 2, 0, 39), "me").node, "other");
  EXPECT_EQ(book.classify(self, v4(10, 2, 0, 0), "me").node, "n0");
}

}  // namespace
}  // namespace bpftrain::collector::loader
