// This machine's host name (gethostname), the name peers on other nodes are told to reach it
// by (Gloo's multi-node transport, the launcher's published endpoints and member records).
#pragma once

#include <string>

namespace shardtrain {

// "" only if the system call fails.
std::string host_name();

// What `name` resolves to on this machine (getaddrinfo).
struct HostResolution {
  bool resolved = false;
  std::string error;     // why not (gai_strerror), when !resolved
  std::string routable;  // its first address that is neither loopback nor link-local, numeric;
                         // "" when it has none (e.g. Debian's '127.0.1.1 <name>' /etc/hosts line)
};
HostResolution resolve_host(const std::string& name);

// Throws Error (exit 2) naming `name` and what to do when it does not resolve to an address
// (getaddrinfo): Gloo binds to what the host's name resolves to, and would otherwise fail inside
// its transport without saying why (a rank died of SIGSEGV on a host without an /etc/hosts entry).
void require_host_resolves(const std::string& name);

}  // namespace shardtrain
