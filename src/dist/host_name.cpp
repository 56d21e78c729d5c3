#include "dist/host_name.h"

#include <fmt/format.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "core/error.h"

namespace shardtrain {

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

HostResolution resolve_host(const std::string& name) {
  HostResolution out;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const int rc = name.empty() ? EAI_NONAME : ::getaddrinfo(name.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    out.error = ::gai_strerror(rc);
    return out;
  }
  out.resolved = true;
  for (const addrinfo* entry = found; entry != nullptr; entry = entry->ai_next) {
    const void* raw = nullptr;
    bool local = false;
    if (entry->ai_family == AF_INET) {
      const in_addr& a = reinterpret_cast<const sockaddr_in*>(entry->ai_addr)->sin_addr;
      raw = &a;
      local = (ntohl(a.s_addr) >> 24) == 127;
    } else if (entry->ai_family == AF_INET6) {
      const in6_addr& a = reinterpret_cast<const sockaddr_in6*>(entry->ai_addr)->sin6_addr;
      raw = &a;
      local = IN6_IS_ADDR_LOOPBACK(&a) != 0 || IN6_IS_ADDR_LINKLOCAL(&a) != 0;
    }
    char text[INET6_ADDRSTRLEN] = {};
    if (raw != nullptr && !local && ::inet_ntop(entry->ai_family, raw, text, sizeof(text))) {
      out.routable = text;
      break;
    }
  }
  ::freeaddrinfo(found);
  return out;
}

void require_host_resolves(const std::string& name) {
  const HostResolution resolution = resolve_host(name);
  if (resolution.resolved) return;
  throw Error(fmt::format(
      "this host's name '{}' does not resolve ({}), so the ranks cannot exchange addresses; "
      "HINT: add it to /etc/hosts (e.g. '127.0.1.1 {}' or this node's address) or name the "
      "network interface with GLOO_SOCKET_IFNAME",
      name, resolution.error, name));
}

}  // namespace shardtrain
