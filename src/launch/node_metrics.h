// NodeMetrics: the launcher agent's side of the node's /metrics endpoint (obs/metrics_endpoint.h).
//
// The agent creates one per run when metrics are on (`--metrics-port`): it makes a private
// directory (under /dev/shm when present, else the temp dir), whose path the agent passes to
// every worker as SHARDTRAIN_METRICS_DIR (dist/worker_env.h), and serves, per scrape, what the
// workers last wrote there (local-<LOCAL_RANK>.json, train/rank_metrics_publisher.h) for the
// current generation's local ranks. Counters go through CounterContinuity keyed by local rank, so a
// restarted worker never makes them fall. A file that is missing or unreadable is skipped
// (its rank has not finished a step yet). The destructor removes the files the workers wrote
// there and the directory. Throws Error naming --metrics-port when the port cannot be bound.
#pragma once

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "obs/counter_continuity.h"
#include "obs/metrics_endpoint.h"

namespace shardtrain::launch {

class NodeMetrics {
 public:
  NodeMetrics(const MetricsOptions& options, NodeIdentity identity);
  ~NodeMetrics();
  NodeMetrics(const NodeMetrics&) = delete;
  NodeMetrics& operator=(const NodeMetrics&) = delete;

  // A new generation: its node rank, restart count, generation number and local rank count.
  void start_generation(int node_rank, int64_t restarts, int64_t generation, int local_ranks);
  // The snapshots the endpoint shows now (counters continued).
  std::vector<RankSnapshot> read_ranks();

  // The directory the workers write to (WorkerEnv::metrics_dir).
  const std::string& dir() const { return dir_; }
  int port() const { return endpoint_->port(); }

 private:
  std::string dir_;
  std::mutex mutex_;  // continuity_, local_ranks_
  CounterContinuity continuity_;
  int local_ranks_ = 0;
  std::unique_ptr<NodeMetricsEndpoint> endpoint_;  // last: stops scraping first
};

}  // namespace shardtrain::launch
