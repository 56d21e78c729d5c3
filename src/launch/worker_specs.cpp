#include "launch/worker_specs.h"

#include <algorithm>
#include <cstdlib>

#include "dist/store_keys.h"
#include "dist/worker_env.h"

namespace shardtrain::launch {

std::vector<WorkerSpec> worker_specs(const LaunchConfig& config, const Generation& gen,
                                     const AgentStores::WorkerEndpoints& endpoints,
                                     const std::string& run_id, const std::string& attempt_dir,
                                     const std::string& metrics_dir) {
  std::vector<WorkerSpec> specs;
  const int first_rank = gen.first_rank();
  const int world_size = gen.world_size();
  for (int local = 0; local < config.nproc_per_node; ++local) {
    WorkerEnv env;
    env.launched = true;
    env.rank = first_rank + local;
    env.world = world_size;
    env.local_rank = local;
    env.local_world = config.nproc_per_node;
    env.group_rank = gen.group_rank;
    env.group_world = static_cast<int>(gen.members.size());
    // One role per job: its ranks are the job's.
    env.role_name = config.role;
    env.role_rank = env.rank;
    env.role_world = world_size;
    env.master_addr = endpoints.master.host;
    env.master_port = endpoints.master.port;
    env.restart_count = static_cast<int>(gen.attempt);
    env.max_restarts = config.max_restarts;
    env.run_id = run_id;
    env.store_host = endpoints.store.host;
    env.store_port = endpoints.store.port;
    env.store_secret = endpoints.store_secret;
    env.store_prefix = store_keys::worker_attempt(run_id, gen.attempt);
    env.metrics_dir = metrics_dir;
    WorkerSpec spec;
    spec.global_rank = env.rank;
    spec.local_rank = local;
    route_output(config, local, attempt_dir, spec);
    env.error_file = spec.error_file;
    spec.env = worker_environment(env);
    // As torchrun: one thread per worker unless the user chose, so N workers do not
    // oversubscribe the cores N times.
    if (config.nproc_per_node > 1 && std::getenv("OMP_NUM_THREADS") == nullptr) {
      spec.env["OMP_NUM_THREADS"] = "1";
    }
    specs.push_back(std::move(spec));
  }
  return specs;
}

bool on_console_by_default(const LaunchConfig& config, int local_rank) {
  if (!config.local_ranks_filter.empty()) {
    return std::find(config.local_ranks_filter.begin(), config.local_ranks_filter.end(),
                     local_rank) != config.local_ranks_filter.end();
  }
  const StreamChoice none;
  const StreamChoice& teed =
      static_cast<size_t>(local_rank) < config.tee.size() ? config.tee[local_rank] : none;
  if (teed.out || teed.err) return true;
  return !config.shardtrain_worker || local_rank == 0;
}

void route_output(const LaunchConfig& config, int local_rank, const std::string& attempt_dir,
                  WorkerSpec& spec) {
  const bool console = on_console_by_default(config, local_rank);
  spec.out.console = spec.err.console = console;
  if (attempt_dir.empty()) return;
  const std::string dir = attempt_dir + "/" + std::to_string(local_rank);
  spec.error_file = dir + "/error.json";
  const StreamChoice none;
  const auto at = [&](const std::vector<StreamChoice>& v) -> const StreamChoice& {
    return static_cast<size_t>(local_rank) < v.size() ? v[local_rank] : none;
  };
  const StreamChoice& redirected = at(config.redirects);
  const StreamChoice& teed = at(config.tee);
  if (redirected.out || teed.out) spec.out.file = dir + "/stdout.log";
  if (redirected.err || teed.err) spec.err.file = dir + "/stderr.log";
  if (redirected.out && !teed.out) spec.out.console = false;
  if (redirected.err && !teed.err) spec.err.console = false;
}

}  // namespace shardtrain::launch
