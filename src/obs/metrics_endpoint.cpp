#include "obs/metrics_endpoint.h"

#include <chrono>

#include "core/log.h"

namespace shardtrain {

NodeMetricsEndpoint::NodeMetricsEndpoint(const MetricsOptions& options, NodeIdentity identity,
                                         RankSource ranks, const std::string& what)
    : ranks_(std::move(ranks)), identity_(std::move(identity)) {
  if (options.gpu) {
    std::string why_not;
    if (std::unique_ptr<NvmlLibrary> nvml = NvmlLibrary::open(options.nvml_library, why_not)) {
      const auto interval =
          std::chrono::milliseconds(static_cast<int64_t>(options.gpu_interval_s * 1000.0 + 0.5));
      const int count = nvml->device_count();
      gpus_ = std::make_unique<GpuSampler>(std::move(nvml), interval);
      log::info("metrics: GPU metrics (DCGM names) for {} GPU(s) from NVML, sampled every {} s",
                count, options.gpu_interval_s);
    } else {
      log::info("metrics: NVML not available ({}); no GPU metrics", why_not);
    }
  } else {
    log::info("metrics: GPU metrics off (metrics.gpu = false)");
  }
  server_ = std::make_unique<MetricsServer>(
      options.address, options.port, [this] { return render(); }, what);
  log::info("metrics: {}", server_->url());
}

NodeMetricsEndpoint::~NodeMetricsEndpoint() { server_.reset(); }

void NodeMetricsEndpoint::set_group_state(const GroupState& group, const std::string& node) {
  std::lock_guard<std::mutex> lock(mutex_);
  group_ = group;
  identity_.node = node;
}

std::string NodeMetricsEndpoint::render() const {
  const std::vector<RankSnapshot> ranks = ranks_();
  Exposition out;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    add_training_families(out, identity_, group_, ranks);
    if (gpus_) add_dcgm_families(out, identity_.hostname, gpus_->latest());
  }
  return out.render();
}

}  // namespace shardtrain
