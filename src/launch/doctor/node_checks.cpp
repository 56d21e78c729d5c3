#include "launch/doctor/node_checks.h"

#include "launch/doctor/checkpoint_need.h"
#include "launch/doctor/efa_checks.h"
#include "launch/doctor/gpu_checks.h"
#include "launch/doctor/host_checks.h"
#include "launch/doctor/network_checks.h"

namespace shardtrain::doctor {

std::vector<CheckResult> run_node_checks(const SystemView& view, const CudaBuildInfo& build,
                                         int nccl_built_version, const NodeCheckOptions& options,
                                         int* gpu_count) {
  std::vector<CheckResult> checks;
  const GpuReport gpus = view.gpus->read();
  if (gpu_count) *gpu_count = static_cast<int>(gpus.gpus.size());
  checks.push_back(check_gpus(gpus, build));
  checks.push_back(check_gpu_health(gpus));
  checks.push_back(check_cuda_driver(gpus, build));

  const NetworkFacts network = read_network_facts(view);
  checks.push_back(check_nccl(view, nccl_built_version));
  checks.push_back(check_nccl_net_plugin(view, network, options.expect));
  checks.push_back(check_libfabric(network, options.expect));
  checks.push_back(check_efa_devices(network, options.expect));
  checks.push_back(check_ib_devices(network, options.expect));
  checks.push_back(check_transport(view, network, options.expect));
  checks.push_back(
      check_efa_config(view, network, read_efa_facts(view, network), options.expect));

  checks.push_back(check_shm(view, static_cast<int>(gpus.gpus.size())));
  checks.push_back(check_memlock(view, network.devices, options.expect));
  if (view.resolve_host) {
    checks.push_back(check_hostname(view.host_name, view.resolve_host(view.host_name)));
  }
  std::optional<JobCheckpoints> job;
  if (!options.config_path.empty()) job = job_checkpoints_from_config(options.config_path);
  const std::string dir = !options.checkpoint_dir.empty() ? options.checkpoint_dir
                          : job                           ? job->checkpoint_dir
                                                          : "";
  if (!dir.empty()) {
    checks.push_back(check_disk(view, dir, job ? std::optional(job->need) : std::nullopt));
  }
  if (options.rendezvous) {
    for (CheckResult& r : check_rendezvous(*options.rendezvous, options.network_timeout)) {
      checks.push_back(std::move(r));
    }
  } else {
    checks.push_back(clock_not_compared("no --rdzv-endpoint given"));
  }
  return checks;
}

}  // namespace shardtrain::doctor
