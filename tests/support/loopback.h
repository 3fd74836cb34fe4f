// Loopback sockets for tests: bind to 127.0.0.1 on a port the kernel picks, so tests never
// collide on fixed ports.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <cstdint>

namespace bpftrain::testing {

// Binds `fd` (an AF_INET socket, UDP or TCP) to 127.0.0.1 port 0 and stores the port the kernel
// chose in *port. Returns bind()'s result (0, or -1 with errno set).
inline int bindLoopbackPort0(int fd, uint16_t* port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const int rc = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return rc;
}

}  // namespace bpftrain::testing
