#include "dist/bind_address.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include "core/log.h"

namespace shardtrain {

bool is_loopback_host(const std::string& host) {
  return host == "localhost" || host.rfind("127.", 0) == 0 || host == "::1";
}

std::string bind_address_for(const std::string& host) {
  if (is_loopback_host(host)) return host == "localhost" ? "127.0.0.1" : host;
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0 || found == nullptr) {
    log::warn(
        "store: {} does not resolve on this machine; the store listens on every interface "
        "(it admits only clients with the run's secret)",
        host);
    return "";
  }
  char text[INET6_ADDRSTRLEN] = {};
  std::string address;
  if (::getnameinfo(found->ai_addr, found->ai_addrlen, text, sizeof(text), nullptr, 0,
                    NI_NUMERICHOST) == 0) {
    address = text;
  }
  ::freeaddrinfo(found);
  if (is_loopback_host(address)) {
    // e.g. Debian's /etc/hosts maps the host name to 127.0.1.1, while other nodes reach this
    // one by its real address: only every interface serves them.
    log::info(
        "store: {} resolves to {} here; the store listens on every interface (it admits "
        "only clients with the run's secret)",
        host, address);
    return "";
  }
  return address;
}

}  // namespace shardtrain
