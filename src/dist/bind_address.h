// Which local address a store server binds so that only the interface its peers use listens.
//
// bind_address_for(host): for a store that other nodes reach at `host` (a name or an address),
// the numeric address `host` resolves to first on this machine ("localhost" -> "127.0.0.1", a
// numeric address -> itself). "" (every interface) only when `host` does not resolve here (a
// Kubernetes service name routed from outside) or resolves to a loopback address while it is
// not a loopback name (Debian's /etc/hosts maps the host name to 127.0.1.1, while other nodes
// reach it by its real address); both cases are logged. The store still admits only clients
// with the run's secret (dist/store_secret.h).
#pragma once

#include <string>

namespace shardtrain {

// "localhost", 127.x.y.z or ::1.
bool is_loopback_host(const std::string& host);

std::string bind_address_for(const std::string& host);

}  // namespace shardtrain
