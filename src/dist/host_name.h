// This machine's host name (gethostname), the name peers on other nodes are told to reach it
// by (Gloo's multi-node transport, the launcher's published endpoints and member records).
#pragma once

#include <string>

namespace shardtrain {

// "" only if the system call fails.
std::string host_name();

}  // namespace shardtrain
