// WorkerEnv: the launcher-to-worker contract. `shardtrain launch` (launch/agent.cpp) starts
// every worker with these environment variables; a worker parses them once, here, and passes
// the struct down. Nothing else in the program reads these names (writer and reader share
// the table in worker_env.cpp, so they cannot drift apart).
//
//   torchrun's names (PyTorch's env:// init and torchelastic read them too):
//     RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE,
//     ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR, MASTER_PORT,
//     TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
//     TORCHELASTIC_USE_AGENT_STORE, TORCHELASTIC_ERROR_FILE
//   shardtrain's own:
//     SHARDTRAIN_STORE (HOST:PORT of the launcher's TCP store: rendezvous of shardtrain
//       workers and their heartbeats), SHARDTRAIN_STORE_PREFIX (this attempt's key scope in
//       it), SHARDTRAIN_STORE_SECRET (the run's store secret, dist/store_secret.h: every store
//       client presents it), SHARDTRAIN_RUN_ID, SHARDTRAIN_RESTART_COUNT, SHARDTRAIN_METRICS_DIR (where the
//       node's agent reads the ranks' metrics snapshots; set only with launch --metrics-port)
//   set by the user, read here so that one place reads the environment:
//     SHARDTRAIN_STORE_DIR (a FileStore directory instead of a TCP store), GLOO_SOCKET_IFNAME
//     (alias SHARDTRAIN_GLOO_IFNAME), SHARDTRAIN_COMM_TIMEOUT_S
//   set by Kubernetes (the downward API; `shardtrain k8s` manifests set them), metric labels:
//     POD_NAME, POD_NAMESPACE
//
// MASTER_ADDR/MASTER_PORT follow torchrun's classic meaning: a port that is free on the host of
// global rank 0, for rank 0 of a PyTorch job to host its own c10d TCPStore; hence
// TORCHELASTIC_USE_AGENT_STORE=False (the agent's store speaks shardtrain's protocol, not
// c10d's, so PyTorch cannot be its client). shardtrain workers use SHARDTRAIN_STORE, and fall
// back to MASTER_ADDR:MASTER_PORT when it is absent (workers started by hand).
//
// Validation: without RANK and WORLD_SIZE the process is a single rank (world 1). Otherwise a
// malformed value, or a missing variable the others require, is an Error naming it.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <optional>
#include <string>

namespace shardtrain {

// Looks up an environment variable; nullopt when unset. Injected so tests need not touch the
// real environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
// The process environment (getenv).
EnvLookup process_env();

// The pod a process runs in (POD_NAME, POD_NAMESPACE); "" = not on Kubernetes.
struct PodIdentity {
  std::string name;
  std::string namespace_name;
};
// Never throws: any value is a valid label.
PodIdentity parse_pod_identity(const EnvLookup& env);

struct WorkerEnv {
  int rank = 0, world = 1;              // RANK, WORLD_SIZE
  int local_rank = 0, local_world = 1;  // LOCAL_RANK, LOCAL_WORLD_SIZE
  int group_rank = 0, group_world = 1;  // GROUP_RANK, GROUP_WORLD_SIZE (node index and count)
  std::string role_name = "default";    // ROLE_NAME (--role)
  int role_rank = 0, role_world = 1;    // ROLE_RANK, ROLE_WORLD_SIZE
  std::string master_addr;              // MASTER_ADDR
  int master_port = 0;                  // MASTER_PORT
  int restart_count = 0;                // TORCHELASTIC_RESTART_COUNT (= SHARDTRAIN_RESTART_COUNT)
  int max_restarts = 0;                 // TORCHELASTIC_MAX_RESTARTS
  std::string run_id;                   // TORCHELASTIC_RUN_ID (= SHARDTRAIN_RUN_ID)
  std::string error_file;               // TORCHELASTIC_ERROR_FILE ("" = none)
  std::string store_host;               // SHARDTRAIN_STORE host ("" = not given)
  int store_port = 0;                   // SHARDTRAIN_STORE port
  std::string store_prefix;             // SHARDTRAIN_STORE_PREFIX ("" = no heartbeats)
  std::string store_secret;             // SHARDTRAIN_STORE_SECRET ("" = not given)
  std::string store_dir;                // SHARDTRAIN_STORE_DIR ("" = TCP store)
  std::string gloo_ifname;              // GLOO_SOCKET_IFNAME / SHARDTRAIN_GLOO_IFNAME
  std::optional<std::chrono::seconds> comm_timeout;  // SHARDTRAIN_COMM_TIMEOUT_S
  std::string metrics_dir;  // SHARDTRAIN_METRICS_DIR ("" = no agent endpoint)
  PodIdentity pod;          // POD_NAME, POD_NAMESPACE

  // Whether a launcher started this process (RANK and WORLD_SIZE were set).
  bool launched = false;

  // The store shardtrain ranks rendezvous through: SHARDTRAIN_STORE, else MASTER_ADDR:PORT.
  std::string rendezvous_host() const { return store_host.empty() ? master_addr : store_host; }
  int rendezvous_port() const { return store_host.empty() ? master_port : store_port; }
};

// Parses and validates the contract. Throws Error naming the variable when one is malformed,
// missing while the others require it, or inconsistent (RANK >= WORLD_SIZE, LOCAL_WORLD_SIZE
// not dividing WORLD_SIZE).
WorkerEnv parse_worker_env(const EnvLookup& env);
// parse_worker_env(process_env()).
WorkerEnv read_worker_env();

// The writer side: the variables the launcher sets for a worker described by `env` (every
// contract variable; the user-set ones only when non-empty). parse_worker_env of the result
// gives `env` back.
std::map<std::string, std::string> worker_environment(const WorkerEnv& env);

// The variable names (the one spelling of each).
namespace worker_env_names {
inline constexpr char kRank[] = "RANK";
inline constexpr char kWorldSize[] = "WORLD_SIZE";
inline constexpr char kLocalRank[] = "LOCAL_RANK";
inline constexpr char kLocalWorldSize[] = "LOCAL_WORLD_SIZE";
inline constexpr char kGroupRank[] = "GROUP_RANK";
inline constexpr char kGroupWorldSize[] = "GROUP_WORLD_SIZE";
inline constexpr char kRoleName[] = "ROLE_NAME";
inline constexpr char kRoleRank[] = "ROLE_RANK";
inline constexpr char kRoleWorldSize[] = "ROLE_WORLD_SIZE";
inline constexpr char kMasterAddr[] = "MASTER_ADDR";
inline constexpr char kMasterPort[] = "MASTER_PORT";
inline constexpr char kRestartCount[] = "TORCHELASTIC_RESTART_COUNT";
inline constexpr char kMaxRestarts[] = "TORCHELASTIC_MAX_RESTARTS";
inline constexpr char kRunId[] = "TORCHELASTIC_RUN_ID";
inline constexpr char kUseAgentStore[] = "TORCHELASTIC_USE_AGENT_STORE";
inline constexpr char kErrorFile[] = "TORCHELASTIC_ERROR_FILE";
inline constexpr char kShardtrainRestartCount[] = "SHARDTRAIN_RESTART_COUNT";
inline constexpr char kShardtrainRunId[] = "SHARDTRAIN_RUN_ID";
inline constexpr char kStore[] = "SHARDTRAIN_STORE";
inline constexpr char kStorePrefix[] = "SHARDTRAIN_STORE_PREFIX";
inline constexpr char kStoreSecret[] = "SHARDTRAIN_STORE_SECRET";
inline constexpr char kStoreDir[] = "SHARDTRAIN_STORE_DIR";
inline constexpr char kGlooIfname[] = "GLOO_SOCKET_IFNAME";
inline constexpr char kGlooIfnameAlias[] = "SHARDTRAIN_GLOO_IFNAME";
inline constexpr char kCommTimeout[] = "SHARDTRAIN_COMM_TIMEOUT_S";
inline constexpr char kMetricsDir[] = "SHARDTRAIN_METRICS_DIR";
inline constexpr char kPodName[] = "POD_NAME";
inline constexpr char kPodNamespace[] = "POD_NAMESPACE";
}  // namespace worker_env_names

}  // namespace shardtrain
