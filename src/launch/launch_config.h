// Launcher configuration: the torchrun-compatible flags, merged with the PET_* environment
// variables (torchrun's convention, set by Kubeflow PyTorchJob/TrainJob), then validated.
//
// Precedence: a command-line flag wins over its PET_* variable, which wins over the default.
// Every invalid value throws shardtrain::Error with one line naming the flag and a valid
// example, so `shardtrain launch` exits 2 on any bad input.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dist/etcd_http.h"

namespace shardtrain::launch {

// The flags as typed (nullopt = not given), before parsing and validation.
struct LaunchFlags {
  std::optional<std::string> nnodes;          // --nnodes N | MIN:MAX       PET_NNODES
  std::optional<std::string> nproc_per_node;  // --nproc-per-node N|auto    PET_NPROC_PER_NODE
  std::optional<std::string> node_rank;       // --node-rank                PET_NODE_RANK
  std::optional<std::string> rdzv_endpoint;   // --rdzv-endpoint HOST:PORT  PET_RDZV_ENDPOINT
  std::optional<std::string> rdzv_id;         // --rdzv-id                  PET_RDZV_ID
  std::optional<std::string> rdzv_backend;    // --rdzv-backend             PET_RDZV_BACKEND
  std::optional<std::string> rdzv_conf;       // --rdzv-conf k=v,...        PET_RDZV_CONF
  std::optional<std::string> max_restarts;    // --max-restarts             PET_MAX_RESTARTS
  std::optional<std::string> master_addr;     // --master-addr              PET_MASTER_ADDR
  std::optional<std::string> master_port;     // --master-port              PET_MASTER_PORT
  std::optional<std::string> stop_grace;      // --stop-grace SECONDS       PET_STOP_GRACE
  std::optional<std::string> watchdog_timeout;  // --watchdog-timeout SECONDS PET_WATCHDOG_TIMEOUT
  bool standalone = false;                    // --standalone               PET_STANDALONE
  std::vector<std::string> command;           // after "--"
};

// The validated configuration an agent runs with.
struct LaunchConfig {
  // --nnodes MIN:MAX (N = N:N). A rendezvous completes when max_nodes agents have joined, or
  // last_call_timeout after min_nodes have (launch/rendezvous.h).
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  // --node-rank: a preference, not a promise. Agents that give one are ordered by it when a
  // group first forms (so distinct ranks 0..N-1 are kept); later generations keep the previous
  // order. With the c10d backend, the agent with node rank 0 hosts the store.
  int node_rank = 0;
  bool node_rank_given = false;  // from --node-rank or PET_NODE_RANK
  bool standalone = false;   // one node; the store runs on a free loopback port
  // "c10d": one agent hosts the embedded TCP store at the rendezvous endpoint;
  // "etcd": agents meet in etcd v3 at the endpoint (launch/agent_stores.h).
  std::string rdzv_backend = "c10d";
  std::string rdzv_host = "127.0.0.1";
  int rdzv_port = 29500;
  // --rdzv-id; when not given, a random id on one node, one derived from the store secret on
  // several (never a guessable default such as torchrun's "none").
  std::string rdzv_id;
  // The run's store secret (dist/store_secret.h): --rdzv-conf token= / token_file=, else
  // PET_RDZV_TOKEN, else generated (one node). Empty with etcd when none was given: the agents
  // then share a generated one through etcd (launch/agent_stores.h).
  std::string store_secret;
  // etcd security, torchelastic's --rdzv-conf keys: cacert, cert, key (TLS with client
  // certificates) and user, password (etcd authentication).
  EtcdTlsFiles etcd_tls;
  std::string etcd_user, etcd_password;
  int max_restarts = 0;
  std::chrono::milliseconds stop_grace{5000};
  // --rdzv-conf keys, torchrun's names and defaults:
  std::chrono::milliseconds join_timeout{600000};      // join_timeout: wait for min_nodes
  std::chrono::milliseconds last_call_timeout{30000};  // last_call_timeout: wait for more
  // An agent whose heartbeat (TCP store) or etcd lease has not been renewed for
  // keep_alive_interval x keep_alive_max_attempt has left the group.
  std::chrono::milliseconds keep_alive_interval{5000};  // keep_alive_interval
  int keep_alive_max_attempt = 3;                       // keep_alive_max_attempt
  // A worker group in which no rank's heartbeat (train/heartbeat.h) advances for this long is
  // reported and restarted (launch/watchdog.h); 0 turns the watchdog off.
  std::chrono::milliseconds watchdog_timeout{120000};
  // The worker command: a shardtrain subcommand and its arguments, or an executable when the
  // first element contains '/'.
  std::vector<std::string> command;
};

// Looks up an environment variable; nullopt when unset. Injected so tests need not touch
// the real environment.
using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;
EnvLookup process_env();

// Merges flags with PET_* variables, validates, and resolves `auto` and the endpoint.
LaunchConfig resolve_launch_config(const LaunchFlags& flags, const EnvLookup& env);

// GPUs on this host: `nvidia-smi -L` line count, else /dev/nvidia<N> device count, else 0.
int count_local_gpus();

}  // namespace shardtrain::launch
