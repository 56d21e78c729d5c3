// All of `shardtrain doctor`'s node checks in their printed order, over one SystemView.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launch/doctor/check_result.h"
#include "launch/doctor/node_facts.h"
#include "launch/doctor/rendezvous_checks.h"
#include "launch/doctor/system_view.h"
#include "ops/cuda_build_info.h"

namespace shardtrain::doctor {

struct NodeCheckOptions {
  std::optional<Transport> expect;             // --expect-transport
  std::string checkpoint_dir;                  // --checkpoint-dir, else train.checkpoint_dir
  std::string config_path;                     // --config ("" = none)
  std::optional<RendezvousTarget> rendezvous;  // --rdzv-endpoint / --rdzv-backend
  std::chrono::milliseconds network_timeout{5000};
};

// gpus, gpu_health, cuda_driver, nccl, nccl_net_plugin, libfabric, efa_devices, ib_devices,
// transport, shm, memlock, disk (with a checkpoint dir), rendezvous (with an endpoint), clock.
// `gpu_count` receives the number of GPUs found (for the NCCL test). Throws Error only for a
// bad --config (a usage error).
std::vector<CheckResult> run_node_checks(const SystemView& view, const CudaBuildInfo& build,
                                         int nccl_built_version, const NodeCheckOptions& options,
                                         int* gpu_count = nullptr);

}  // namespace shardtrain::doctor
