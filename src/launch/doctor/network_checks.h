// Doctor checks of the collective-communication stack of a node, each a plain function over
// facts read from a SystemView (node_facts.h), so tests run them against made-up trees.
// `expect` is --expect-transport (nullopt: not given).
//   nccl:            libnccl.so.2 loads, ncclGetVersion against the version the binary was
//                    built with (FAIL missing or older major.minor, WARN older patch)
//   nccl_net_plugin: libnccl-net*.so (aws-ofi-nccl) on the loader path; FAIL when EFA is
//                    expected and none is there, WARN when EFA devices exist without one (NCCL
//                    would fall back to sockets)
//   libfabric:       libfabric.so.1 and its efa provider; needed only for EFA
//   efa_devices:     /sys/class/infiniband/* whose driver is efa
//   ib_devices:      the other HCAs and their ports' link state
//   transport:       the variables that steer NCCL (FI_PROVIDER, FI_EFA_USE_DEVICE_RDMA,
//                    NCCL_NET, NCCL_SOCKET_IFNAME, NCCL_IB_HCA, NCCL_IB_DISABLE), whether they name
//                    things that exist, and the inter-node transport NCCL will pick; FAIL when it
//                    differs from `expect`
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "launch/doctor/check_result.h"
#include "launch/doctor/node_facts.h"

namespace shardtrain::doctor {

struct NetworkFacts {
  RdmaDevices devices;
  std::vector<std::string> interfaces;
  std::vector<std::string> plugins;
  FabricInfo fabric;
};
NetworkFacts read_network_facts(const SystemView& view);

CheckResult check_nccl(const SystemView& view, int built_version);
CheckResult check_nccl_net_plugin(const SystemView& view, const NetworkFacts& facts,
                                  std::optional<Transport> expect);
CheckResult check_libfabric(const NetworkFacts& facts, std::optional<Transport> expect);
CheckResult check_efa_devices(const NetworkFacts& facts, std::optional<Transport> expect);
CheckResult check_ib_devices(const NetworkFacts& facts, std::optional<Transport> expect);
CheckResult check_transport(const SystemView& view, const NetworkFacts& facts,
                            std::optional<Transport> expect);

// The inter-node transport NCCL will choose with this environment and these devices:
// NCCL_NET when set; else the net plugin when one is found and EFA devices exist; else IB when
// an HCA port is active and NCCL_IB_DISABLE is not 1; else sockets.
Transport predict_transport(const SystemView& view, const NetworkFacts& facts);

// "2.28.3" from 22803 (and the pre-2.9 code form 2704 = 2.7.4).
std::string nccl_version_text(int code);

}  // namespace shardtrain::doctor
