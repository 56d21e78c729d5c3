// RankMetricsPublisher: hands each step's StepReport to the node's /metrics endpoint.
//
// Under shardtrain's launcher (WorkerEnv::run_id set) with metrics on, the agent serves the
// endpoint and passes SHARDTRAIN_METRICS_DIR: publish() then replaces
// <dir>/local-<LOCAL_RANK>.json atomically (io/atomic_file.h) with this rank's RankSnapshot,
// at most every 250 ms and always for the last step. Without the launcher and with
// metrics.port set, local rank 0 serves the endpoint itself (NodeMetricsEndpoint, its own
// snapshot only; other local ranks publish nothing), so the constructor throws Error naming
// metrics.port when the port cannot be bound. Otherwise publish() does nothing.
// The snapshot's counters (steps, tokens, the step-time histogram) count this process's work;
// the agent keeps them monotonic across restarts (obs/counter_continuity.h).
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "dist/worker_env.h"
#include "obs/metrics_endpoint.h"
#include "obs/progress.h"
#include "obs/rank_snapshot.h"
#include "train/metrics_config.h"

namespace shardtrain {

class RankMetricsPublisher {
 public:
  RankMetricsPublisher(const MetricsConfig& config, const WorkerEnv& env);
  ~RankMetricsPublisher();
  RankMetricsPublisher(const RankMetricsPublisher&) = delete;
  RankMetricsPublisher& operator=(const RankMetricsPublisher&) = delete;

  bool active() const { return !file_.empty() || endpoint_ != nullptr; }
  void publish(const StepReport& report);

 private:
  std::string file_;  // "" = no file
  std::chrono::steady_clock::time_point last_write_{};
  mutable std::mutex mutex_;  // snapshot_, read by the endpoint's threads
  RankSnapshot snapshot_;
  std::unique_ptr<NodeMetricsEndpoint> endpoint_;
};

}  // namespace shardtrain
