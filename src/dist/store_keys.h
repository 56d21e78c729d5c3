// Store key scheme: every key prefix the launcher agents and the workers use, in one place.
//
// Agents' rendezvous (launch/rendezvous.h), in the run's scope:
//   embedded TCP store  rdzv/<run id>/...          etcd v3  /shardtrain/<run id>/...
//   then gen/<g>/... per rendezvous generation g, and alive/<agent id> (launch/agent_liveness.h);
//   with etcd also store_secret, the workers' stores' secret the agents share
//   (dist/store_secret.h).
// Workers of one attempt (SHARDTRAIN_STORE_PREFIX, dist/worker_env.h), in the workers' store:
//   run/<run id>/gen/<attempt>/heartbeat/<rank>, .../heartbeat_alive/<rank>
//   (dist/heartbeat_record.h)
// World Comm bootstrap of shardtrain workers (dist/dist_env.h connect_world):
//   shardtrain/restart<attempt>/world/... (Gloo / NCCL ids; sub-groups add their own suffix).
// Every scope carries the run id or the attempt, so a rerun or a restarted group never reads a
// key of an earlier one.
#pragma once

#include <cstdint>
#include <string>

namespace shardtrain::store_keys {

// The agents' rendezvous scope of a run.
inline std::string tcp_rendezvous_scope(const std::string& run_id) {
  return "rdzv/" + run_id + "/";
}
inline std::string etcd_rendezvous_scope(const std::string& run_id) {
  return "/shardtrain/" + run_id + "/";
}
// One rendezvous generation's keys, inside the run's scope.
inline std::string generation(int64_t g) { return "gen/" + std::to_string(g) + "/"; }
// An agent's liveness key, inside the run's scope (etcd leases every key starting so).
inline constexpr char kAlivePrefix[] = "alive/";
inline std::string alive(const std::string& agent_id) { return kAlivePrefix + agent_id; }
// etcd only, inside the run's scope: the secret of the workers' TCP stores, set by the first
// agent (compare-and-set) when none was given.
inline constexpr char kStoreSecret[] = "store_secret";

// The scope of one attempt's workers in the workers' store (SHARDTRAIN_STORE_PREFIX).
inline std::string worker_attempt(const std::string& run_id, int64_t attempt) {
  return "run/" + run_id + "/gen/" + std::to_string(attempt) + "/";
}
// Inside a worker attempt's scope: a rank's heartbeat record and its liveness counter.
inline std::string heartbeat(int rank) { return "heartbeat/" + std::to_string(rank); }
inline std::string heartbeat_alive(int rank) { return "heartbeat_alive/" + std::to_string(rank); }

// Where shardtrain workers bootstrap their world Comm.
inline std::string world_comm(int restart_count) {
  return "shardtrain/restart" + std::to_string(restart_count) + "/world";
}

}  // namespace shardtrain::store_keys
