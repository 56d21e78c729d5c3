// The shardtrain_* metric families of one node: every local rank's latest RankSnapshot as
// samples labelled rank, local_rank, node, run_id (plus pod and namespace when the node runs
// in a Kubernetes pod), in base units (seconds, bytes, ratios), counters ending in _total.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "obs/prometheus_text.h"
#include "obs/rank_snapshot.h"

namespace shardtrain {

// Who serves the metrics: fixed for the endpoint's lifetime.
struct NodeIdentity {
  std::string node = "0";  // the node's rank in the group
  std::string run_id;
  std::string pod, pod_namespace;  // Kubernetes downward API; "" = label left out
  std::string hostname;            // for the GPU metrics' Hostname label
};

// The launcher's view of the run: the worker group's restarts and the rendezvous generation.
struct GroupState {
  int64_t restarts = 0;
  int64_t generation = 0;
};

// The labels identifying `snapshot`'s rank on `node`.
MetricLabels rank_labels(const NodeIdentity& node, const RankSnapshot& snapshot);

// Adds every shardtrain_* family, one sample per snapshot (optional values only where present).
void add_training_families(Exposition& out, const NodeIdentity& node, const GroupState& group,
                           const std::vector<RankSnapshot>& ranks);

}  // namespace shardtrain
