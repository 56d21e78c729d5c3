// This machine's host name (gethostname), the name peers on other nodes are told to reach it
// by (Gloo's multi-node transport, the launcher's published endpoints and member records).
#pragma once

#include <string>

namespace shardtrain {

// "" only if the system call fails.
std::string host_name();

// Throws Error (exit 2) naming `name` and what to do when it does not resolve to an address
// (getaddrinfo): Gloo binds to what the host's name resolves to, and would otherwise fail inside
// its transport without saying why (a rank died of SIGSEGV on a host without an /etc/hosts entry).
void require_host_resolves(const std::string& name);

}  // namespace shardtrain
