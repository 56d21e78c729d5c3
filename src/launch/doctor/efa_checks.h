// Doctor check of the EFA configuration a node runs with (`efa_config`): the combination of the
// environment (FI_PROVIDER, FI_EFA_USE_DEVICE_RDMA), the EFA device's capability and the versions
// of aws-ofi-nccl and libfabric, as AWS's guidance for libfabric >= 1.18 / aws-ofi-nccl >= 1.7
// puts it:
//   FAIL  FI_EFA_USE_DEVICE_RDMA=1 on an instance whose EFA has no RDMA read (only P-series from
//         p4d and Trainium have it): libfabric aborts at the first transfer;
//   WARN  aws-ofi-nccl older than 1.7 (does not detect GPUDirect RDMA itself);
//   WARN  FI_PROVIDER or FI_EFA_USE_DEVICE_RDMA set with aws-ofi-nccl >= 1.7 and libfabric >= 1.18
//         (detected by them; AWS advises leaving both unset);
//   PASS  otherwise, naming instance type, RDMA read, plugin and libfabric versions.
// Facts, all read through the SystemView so tests fake them:
//   instance type   <root>/sys/devices/virtual/dmi/id/product_name (EC2 writes it there);
//   plugin version  "aws-ofi-nccl X.Y.Z" inside the plugin file (its init log line's text),
//                   searched in the first 64 MiB;
//   libfabric       FabricInfo::version (fi_version()).
// Not an EFA node (no EFA device, --expect-transport not efa): PASS "not an EFA node".
#pragma once

#include <optional>
#include <string>

#include "launch/doctor/check_result.h"
#include "launch/doctor/network_checks.h"

namespace shardtrain::doctor {

struct EfaFacts {
  std::string instance_type;      // "" when unknown
  std::optional<bool> rdma_read;  // nullopt: an instance type shardtrain does not know
  std::string plugin_version;     // "1.9.1"; "" when not found
};
EfaFacts read_efa_facts(const SystemView& view, const NetworkFacts& network);

// Whether EFA on `instance_type` supports RDMA read; nullopt when unknown.
std::optional<bool> efa_rdma_read(const std::string& instance_type);

// "X.Y.Z" after "aws-ofi-nccl " in `bytes`, or "".
std::string find_ofi_nccl_version(const std::string& bytes);

// a < b for dotted versions ("1.7" < "1.18").
bool version_less(const std::string& a, const std::string& b);

CheckResult check_efa_config(const SystemView& view, const NetworkFacts& network,
                             const EfaFacts& efa, std::optional<Transport> expect);

}  // namespace shardtrain::doctor
