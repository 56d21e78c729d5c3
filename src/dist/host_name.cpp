#include "dist/host_name.h"

#include <fmt/format.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"

namespace shardtrain {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

void require_host_resolves(const std::string& name) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = ::getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc == 0) {
    ::freeaddrinfo(found);
    return;
  }
  throw Error(fmt::format(
      "this host's name '{}' does not resolve ({}), so the ranks cannot exchange addresses; "
      "HINT: add it to /etc/hosts (e.g. '127.0.1.1 {}' or this node's address) or name the "
      "network interface with GLOO_SOCKET_IFNAME",
      name, ::gai_strerror(rc), name));
}

}  // namespace shardtrain
