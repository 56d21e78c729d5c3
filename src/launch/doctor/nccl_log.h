// Reading NCCL's own init log (NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,NET,P2P) for the transport
// it really used, so doctor reports what happened rather than what the environment suggests:
//   "NCCL INFO Using network Socket" | "... Using network IB" | "... Using network AWS Libfabric"
//   "NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read"
//   "NCCL INFO Channel 00/0 : 1[1] -> 0[0] [send] via NET/IB/0/GDRDMA"
//   "... via NET/Socket/0", "... via NET/AWS Libfabric/0/GDRDMA", "... via SHM/direct/direct"
// "NET/OFI Selected provider is efa" (aws-ofi-nccl) also marks EFA.
#pragma once

#include <optional>
#include <set>
#include <string>

#include "launch/doctor/node_facts.h"

namespace shardtrain::doctor {

struct NcclLogTransports {
  std::string network;            // from "Using network X"; "" when not seen
  std::set<std::string> paths;    // "P2P", "SHM", "NET/IB", "NET/Socket", "NET/AWS Libfabric"
  bool ofi_efa_provider = false;  // aws-ofi-nccl said it selected the efa provider

  bool used_network() const;  // some channel ran "via NET/..."
  // The transport of the network channels used, or (none used: one node) of the network NCCL
  // initialised; nullopt when neither is in the log or the name is unknown.
  std::optional<Transport> inter_node() const;
  // "P2P+SHM", "NET/IB", ... (sorted, '+'-joined), "none" when empty.
  std::string describe_paths() const;
};

NcclLogTransports parse_nccl_log(const std::string& text);

// Which --expect-transport a NCCL network name means: Socket -> socket, IB -> ib,
// "AWS Libfabric" / "Libfabric" / "OFI" -> efa.
std::optional<Transport> transport_of_network(const std::string& network);

}  // namespace shardtrain::doctor
