#include "common/host_port.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>

#include "tests/support/requirements.h"

namespace bpftrain {
namespace {

HostPort parsed(std::string_view text, PortZero zero = PortZero::kRejected) {
  std::string error;
  std::optional<HostPort> hp = parseHostPort(text, zero, error);
  EXPECT_TRUE(hp) << text << ": " << error;
  return hp.value_or(HostPort{});
}

// The error for `text`, which must not parse.
std::string rejected(std::string_view text, PortZero zero = PortZero::kRejected) {
  std::string error;
  EXPECT_FALSE(parseHostPort(text, zero, error)) << text;
  EXPECT_NE(
      error.find("expected HOST:PORT, [IPV6]:PORT or NAME:PORT, got \"" + std::string(text) + "\""),
      std::string::npos)
      << error;
  return error;
}

TEST(HostPort, Ipv4) {
  EXPECT_EQ(parsed("127.0.0.1:9470"), (HostPort{"127.0.0.1", 9470}));
  EXPECT_EQ(parsed("0.0.0.0:65535"), (HostPort{"0.0.0.0", 65535}));
  EXPECT_EQ(parsed("10.0.0.1:9470").str(), "10.0.0.1:9470");
  EXPECT_NE(rejected("300.1.1.1:80").find("not an IPv4 address"), std::string::npos);
  // getaddrinfo would read these as 10.0.0.1 and 0.0.0.1: a dotted quad or nothing.
  rejected("10.1:80");
  rejected("1:80");
}

TEST(HostPort, Ipv6InBrackets) {
  EXPECT_EQ(parsed("[::1]:9471"), (HostPort{"::1", 9471}));
  EXPECT_EQ(parsed("[fe80::1:2]:1").host, "fe80::1:2");
  EXPECT_EQ(parsed("[::1]:9471").str(), "[::1]:9471");
  EXPECT_NE(rejected("::1:9471").find("brackets"), std::string::npos);
  EXPECT_NE(rejected("[::1:9471").find("']'"), std::string::npos);
  EXPECT_NE(rejected("[::1]9471").find(":PORT"), std::string::npos);
  EXPECT_NE(rejected("[not-v6]:80").find("not an IPv6 address"), std::string::npos);
  rejected("[]:80");
  rejected("[127.0.0.1]:80");
}

TEST(HostPort, Names) {
  EXPECT_EQ(parsed("localhost:9472"), (HostPort{"localhost", 9472}));
  EXPECT_EQ(parsed("collector-1.example_net:9470").host, "collector-1.example_net");
  EXPECT_NE(rejected("/tmp/store:1234").find("host name"), std::string::npos);
  rejected("-x:80");
  rejected("a b:80");
}

TEST(HostPort, MissingPartsAndBadPorts) {
  EXPECT_NE(rejected("127.0.0.1").find("no :PORT"), std::string::npos);
  EXPECT_NE(rejected("localhost").find("no :PORT"), std::string::npos);
  EXPECT_NE(rejected("127.0.0.1:").find("no port"), std::string::npos);
  EXPECT_NE(rejected(":9470").find("no host"), std::string::npos);
  rejected("");
  EXPECT_NE(rejected("127.0.0.1:x").find("not a number"), std::string::npos);
  EXPECT_NE(rejected("127.0.0.1:-1").find("not a number"), std::string::npos);
  EXPECT_NE(rejected("127.0.0.1:+1").find("not a number"), std::string::npos);
  EXPECT_NE(rejected("127.0.0.1:65536").find("0..65535"), std::string::npos);
  EXPECT_NE(rejected("127.0.0.1:99999999999").find("0..65535"), std::string::npos);
}

TEST(HostPort, PortZeroOnlyWhereAllowed) {
  EXPECT_NE(rejected("127.0.0.1:0").find("port 0"), std::string::npos);
  EXPECT_EQ(parsed("127.0.0.1:0", PortZero::kAllowed).port, 0);
  EXPECT_EQ(parsed("[::1]:0", PortZero::kAllowed).port, 0);
}

TEST(HostPort, TrailingGarbage) {
  EXPECT_NE(rejected("127.0.0.1:80x").find("not a number"), std::string::npos);
  rejected("127.0.0.1:80 ");
  rejected("[::1]:80]");
  rejected("[::1]:80:81");
  rejected("127.0.0.1:80:81");
}

// A control byte in the text (a config value with a newline) is spelled \xNN in the error, which
// stays one line.
TEST(HostPort, ControlBytesInTheTextKeepTheErrorOneLine) {
  std::string error;
  EXPECT_FALSE(parseHostPort("host\n1:80", PortZero::kRejected, error));
  EXPECT_EQ(error.find('\n'), std::string::npos) << error;
  EXPECT_NE(error.find("got \"host\\x0a1:80\""), std::string::npos) << error;
}

TEST(HostPort, ResolvesNumericAndNames) {
  std::string error;
  auto v4 = resolveHostPort({"127.0.0.1", 9470}, SOCK_DGRAM, error);
  ASSERT_TRUE(v4) << error;
  EXPECT_EQ(v4->family(), AF_INET);
  EXPECT_EQ(v4->port(), 9470);
  EXPECT_EQ(v4->str(), "127.0.0.1:9470");
  auto v6 = resolveHostPort({"::1", 9471}, SOCK_STREAM, error);
  ASSERT_TRUE(v6) << error;
  EXPECT_EQ(v6->family(), AF_INET6);
  EXPECT_EQ(v6->str(), "[::1]:9471");
  auto name = resolveHostPort({"localhost", 9472}, SOCK_DGRAM, error);
  ASSERT_TRUE(name) << error;
  EXPECT_EQ(name->port(), 9472);
  EXPECT_FALSE(resolveHostPort({"no-such-host.invalid", 1}, SOCK_DGRAM, error));
  EXPECT_NE(error.find("cannot resolve \"no-such-host.invalid\""), std::string::npos) << error;
}

// Parse, resolve, bind port 0, read the kernel's port back, and reach the socket through it.
void bindsAndReceives(const std::string& text) {
  std::string error;
  auto hp = parseHostPort(text, PortZero::kAllowed, error);
  ASSERT_TRUE(hp) << error;
  auto addr = resolveHostPort(*hp, SOCK_DGRAM, error);
  ASSERT_TRUE(addr) << error;
  int rx = socket(addr->family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(rx, 0);
  ASSERT_EQ(bind(rx, addr->get(), addr->length), 0) << text << ": " << std::strerror(errno);
  auto bound = boundAddress(rx);
  ASSERT_TRUE(bound);
  EXPECT_NE(bound->port(), 0);
  EXPECT_EQ(bound->host(), hp->host);

  // The kernel's port, set on the resolved address (as the ingest does for its other sockets).
  std::optional<SocketAddress> dst = *addr;
  dst->setPort(bound->port());
  EXPECT_EQ(dst->port(), bound->port());
  EXPECT_EQ(dst->str(), (HostPort{hp->host, bound->port()}).str());
  int tx = socket(dst->family(), SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(tx, 0);
  const char msg[] = "hi";
  ASSERT_EQ(sendto(tx, msg, sizeof msg, 0, dst->get(), dst->length), ssize_t(sizeof msg));
  char got[8] = {};
  EXPECT_EQ(recv(rx, got, sizeof got, 0), ssize_t(sizeof msg));
  EXPECT_STREQ(got, msg);
  close(tx);
  close(rx);
}

TEST(HostPort, ListeningAddressBindsIpv4) { bindsAndReceives("127.0.0.1:0"); }

TEST(HostPort, ListeningAddressBindsIpv6) {
  int probe = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_loopback;
  const bool have_v6 = probe >= 0 && bind(probe, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  if (probe >= 0) close(probe);
  if (!have_v6)
    BPFTRAIN_SKIP_OR_FAIL_UNDER_CI("no IPv6 loopback on this host (::1 cannot be bound)");
  bindsAndReceives("[::1]:0");
}

}  // namespace
}  // namespace bpftrain
