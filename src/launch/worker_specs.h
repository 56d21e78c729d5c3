// The worker processes one agent starts for a generation: each one's environment (the
// contract of dist/worker_env.h, written with its worker_environment, so the writer and the
// reader share one definition) and where its logs and error file go.
#pragma once

#include <string>
#include <vector>

#include "launch/agent_stores.h"
#include "launch/launch_config.h"
#include "launch/rendezvous.h"
#include "launch/worker_group.h"

namespace shardtrain::launch {

// Where the per-worker files of one attempt go: <attempt_dir>/<local rank>/ holds error.json
// (TORCHELASTIC_ERROR_FILE) and, with --redirects/--tee, stdout.log and stderr.log.
// "" = no files (no error file is set). `metrics_dir` is the node's metrics directory
// (SHARDTRAIN_METRICS_DIR, launch/node_metrics.h; "" = metrics off).
std::vector<WorkerSpec> worker_specs(const LaunchConfig& config, const Generation& gen,
                                     const AgentStores::WorkerEndpoints& endpoints,
                                     const std::string& run_id, const std::string& attempt_dir,
                                     const std::string& metrics_dir = "");

// Whether local rank `local_rank`'s output reaches the console unless redirected:
// --local-ranks-filter when given; else a rank teed with --tee; else every rank of a PyTorch or
// other command (torchrun's habit) but only local rank 0 of shardtrain's own subcommands (their
// ranks repeat the same reports).
bool on_console_by_default(const LaunchConfig& config, int local_rank);

// Fills spec's console/file routes and error file for `local_rank` (--tee, --redirects, the
// filter above); no files when `attempt_dir` is "".
void route_output(const LaunchConfig& config, int local_rank, const std::string& attempt_dir,
                  WorkerSpec& spec);

}  // namespace shardtrain::launch
