// Which link a transport sample travelled: the same host, or another host (and which one). The
// book learns each node's addresses from the local end of its ranks' own sockets (a rank's
// socket source address is an address of the host it runs on), so a peer address maps to the
// node whose ranks use it. No wire change is needed for ranks one collector sees; a peer address
// no rank of this collector ever used is "other_host" with peer_node "unknown".
//
// Bounded: at most kMaxAddresses addresses and kMaxNodes distinct peer nodes are kept; beyond
// them a peer is labelled "other" (and counted in overflow()), so labels never grow without bound.
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace bpftrain::collector::loader {

enum class LinkClass : uint8_t { kSameHost = 0, kOtherHost = 1 };
inline constexpr int kLinkClassCount = 2;

constexpr std::string_view linkClassName(LinkClass c) {
  return c == LinkClass::kSameHost ? "same_host" : "other_host";
}

// An IPv4 or IPv6 address as the probe reports it (IPv4 in the first 4 bytes). IPv4-mapped IPv6
// addresses are folded to IPv4 so that both spellings of one address are one key.
struct LinkAddress {
  std::array<uint8_t, 16> bytes{};
  bool v6 = false;

  static LinkAddress of(uint16_t family, const uint8_t (&raw)[16]) {
    LinkAddress a;
    static constexpr uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    if (family == 10 /* AF_INET6 */ && std::memcmp(raw, kMapped, 12) != 0) {
      a.v6 = true;
      std::memcpy(a.bytes.data(), raw, 16);
    } else {
      std::memcpy(a.bytes.data(), family == 10 ? raw + 12 : raw, 4);
    }
    return a;
  }
  bool loopback() const {
    if (!v6) return bytes[0] == 127;
    static constexpr uint8_t kOne[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    return std::memcmp(bytes.data(), kOne, 16) == 0;
  }
  bool unspecified() const {
    for (uint8_t b : bytes)
      if (b != 0) return false;
    return true;
  }
  friend bool operator==(const LinkAddress&, const LinkAddress&) = default;
};

struct LinkAddressHash {
  size_t operator()(const LinkAddress& a) const {
    uint64_t lo, hi;
    std::memcpy(&lo, a.bytes.data(), 8);
    std::memcpy(&hi, a.bytes.data() + 8, 8);
    return size_t((lo * 0x9e3779b97f4a7c15ULL) ^ (hi + 0x632be59bd9b4e019ULL + a.v6));
  }
};

class LinkBook {
 public:
  static constexpr size_t kMaxAddresses = 4096;
  static constexpr size_t kMaxNodes = 16;

  struct Peer {
    LinkClass link = LinkClass::kOtherHost;
    std::string_view node;  // the peer's node name, "unknown" or "other"; valid while the book is
    uint32_t id = 0;        // stable small id of (link, node), for callers' caches
  };

  // `addr` is an address of `node` (the source address of one of its ranks' sockets).
  void learn(const LinkAddress& addr, std::string_view node) {
    if (node.empty() || addr.unspecified() || addr.loopback()) return;
    auto it = nodes_of_.find(addr);
    if (it != nodes_of_.end()) {
      if (nameOf(it->second) != node) it->second = nodeIndex(node);  // the address moved host
      return;
    }
    if (nodes_of_.size() >= kMaxAddresses) {
      ++overflow_;
      return;
    }
    nodes_of_.emplace(addr, nodeIndex(node));
  }

  // The link from a socket of a rank on `own_node` with local address `src` to `dst`.
  Peer classify(const LinkAddress& src, const LinkAddress& dst, std::string_view own_node) {
    if (dst.loopback() || dst == src) return same(own_node);
    auto it = nodes_of_.find(dst);
    if (it == nodes_of_.end()) return {LinkClass::kOtherHost, kUnknown, kUnknownId};
    if (it->second != kOtherIndex && !own_node.empty() && names_[it->second] == own_node)
      return same(own_node);
    return {LinkClass::kOtherHost, nameOf(it->second), 2 * it->second + 1};
  }

  size_t addresses() const { return nodes_of_.size(); }
  uint64_t overflow() const { return overflow_; }

 private:
  static constexpr std::string_view kUnknown = "unknown", kOther = "other";
  static constexpr uint32_t kOtherIndex = 0x7ffffff0;  // nodes past kMaxNodes share it
  static constexpr uint32_t kUnknownId = 0xfffffff1, kSameUnknownId = 0xfffffff2;

  std::string_view nameOf(uint32_t index) const {
    return index == kOtherIndex ? kOther : std::string_view(names_[index]);
  }
  Peer same(std::string_view own_node) {
    if (own_node.empty()) return {LinkClass::kSameHost, kUnknown, kSameUnknownId};
    const uint32_t i = nodeIndex(own_node);
    return {LinkClass::kSameHost, nameOf(i), 2 * i};
  }
  uint32_t nodeIndex(std::string_view node) {
    for (uint32_t i = 0; i < names_.size(); ++i)
      if (names_[i] == node) return i;
    if (names_.size() >= kMaxNodes) {
      ++overflow_;
      return kOtherIndex;
    }
    names_.emplace_back(node);
    return uint32_t(names_.size() - 1);
  }

  std::unordered_map<LinkAddress, uint32_t, LinkAddressHash> nodes_of_;
  std::vector<std::string> names_;  // node index -> name
  uint64_t overflow_ = 0;
};

}  // namespace bpftrain::collector::loader
