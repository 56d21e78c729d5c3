// NodeMetricsEndpoint: the one /metrics endpoint of a node. It renders, per scrape, the
// shardtrain_* families of every local rank (obs/training_metrics.h) from `ranks` and the
// DCGM-named GPU families from an NVML sampler (obs/gpu_metrics.h), served by MetricsServer.
//
// Served by the launcher's agent for all of its workers (launch/node_metrics.h), or by a
// training process that runs without the launcher (train/rank_metrics_publisher.h).
// Startup logs "metrics: http://HOST:PORT/metrics" and one line on the GPU metrics (how many
// GPUs, or why NVML is unavailable). Throws Error naming `what` when the port cannot be bound.
// Thread-safe: scrapes run on the server's threads.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "obs/gpu_metrics.h"
#include "obs/metrics_server.h"
#include "obs/rank_snapshot.h"
#include "obs/training_metrics.h"

namespace shardtrain {

// The [metrics] settings (train/train_config.h) and `shardtrain launch --metrics-*` flags.
struct MetricsOptions {
  int port = -1;  // -1 = no endpoint; 0 = a free port
  std::string address = "0.0.0.0";
  bool gpu = true;  // false where a DCGM exporter already runs on the node
  double gpu_interval_s = 1.0;
  std::string nvml_library = "libnvidia-ml.so.1";
  bool enabled() const { return port >= 0; }
};

class NodeMetricsEndpoint {
 public:
  using RankSource = std::function<std::vector<RankSnapshot>()>;
  // REQUIRES: options.enabled(); `ranks` thread-safe.
  NodeMetricsEndpoint(const MetricsOptions& options, NodeIdentity identity, RankSource ranks,
                      const std::string& what);
  ~NodeMetricsEndpoint();

  void set_group_state(const GroupState& group, const std::string& node);
  std::string render() const;
  int port() const { return server_->port(); }
  std::string url() const { return server_->url(); }
  bool has_gpu_metrics() const { return gpus_ != nullptr; }

 private:
  RankSource ranks_;
  mutable std::mutex mutex_;  // identity_ and group_
  NodeIdentity identity_;
  GroupState group_;
  std::unique_ptr<GpuSampler> gpus_;
  std::unique_ptr<MetricsServer> server_;  // last: stops serving before the rest goes
};

}  // namespace shardtrain
