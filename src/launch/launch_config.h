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
#include "dist/worker_env.h"

namespace shardtrain::launch {

// The flags as typed (nullopt = not given), before parsing and validation.
struct LaunchFlags {
  std::optional<std::string> nnodes;              // --nnodes N | MIN:MAX       PET_NNODES
  std::optional<std::string> nproc_per_node;      // --nproc-per-node N|auto    PET_NPROC_PER_NODE
  std::optional<std::string> node_rank;           // --node-rank                PET_NODE_RANK
  std::optional<std::string> rdzv_endpoint;       // --rdzv-endpoint HOST:PORT  PET_RDZV_ENDPOINT
  std::optional<std::string> rdzv_id;             // --rdzv-id                  PET_RDZV_ID
  std::optional<std::string> rdzv_backend;        // --rdzv-backend             PET_RDZV_BACKEND
  std::optional<std::string> rdzv_conf;           // --rdzv-conf k=v,...        PET_RDZV_CONF
  std::optional<std::string> max_restarts;        // --max-restarts             PET_MAX_RESTARTS
  std::optional<std::string> master_addr;         // --master-addr              PET_MASTER_ADDR
  std::optional<std::string> master_port;         // --master-port              PET_MASTER_PORT
  std::optional<std::string> stop_grace;          // --stop-grace SECONDS       PET_STOP_GRACE
  std::optional<std::string> max_stop_grace;      // --max-stop-grace SECONDS   PET_MAX_STOP_GRACE
  std::optional<std::string> watchdog_timeout;    // --watchdog-timeout SECONDS PET_WATCHDOG_TIMEOUT
  bool standalone = false;                        // --standalone               PET_STANDALONE
  std::optional<std::string> tee;                 // --tee 0-3 | LOCAL:0-3,...  PET_TEE
  std::optional<std::string> redirects;           // --redirects (as --tee)     PET_REDIRECTS
  std::optional<std::string> log_dir;             // --log-dir DIR              PET_LOG_DIR
  std::optional<std::string> local_ranks_filter;  // --local-ranks-filter 0,1 PET_LOCAL_RANKS_FILTER
  std::optional<std::string> monitor_interval;    // --monitor-interval S   PET_MONITOR_INTERVAL
  std::optional<std::string> role;                // --role NAME                PET_ROLE
  std::optional<std::string> start_method;        // --start-method spawn|fork|forkserver
  std::optional<std::string> python;              // --python PATH (shardtrain's own)
  std::optional<std::string> module;              // -m MODULE: run `python -m MODULE`
  bool no_python = false;                         // --no-python: the command is an executable
  // The worker command exactly as typed; `after_separator` when it followed "--".
  std::vector<std::string> command;
  bool after_separator = false;
  // shardtrain's own subcommand names: a command starting with one runs this binary.
  std::vector<std::string> subcommands;
};

// Which streams of a worker go to its log files (--redirects: instead of the console;
// --tee: as well as the console).
struct StreamChoice {
  bool out = false, err = false;
};

// The validated configuration an agent runs with.
struct LaunchConfig {
  // --nnodes MIN:MAX (N = N:N). A rendezvous completes when max_nodes agents have joined, or
  // last_call_timeout after min_nodes have (launch/rendezvous.h).
  int min_nodes = 1;
  int max_nodes = 1;
  int nproc_per_node = 1;
  // The most workers one agent starts (the rendezvous refuses a member with more).
  static constexpr int kMaxNprocPerNode = 65536;
  // --node-rank: a preference, not a promise. Agents that give one are ordered by it when a
  // group first forms (so distinct ranks 0..N-1 are kept); later generations keep the previous
  // order. With the c10d backend, the agent with node rank 0 hosts the store.
  int node_rank = 0;
  bool node_rank_given = false;  // from --node-rank or PET_NODE_RANK
  bool standalone = false;       // one node; the store runs on a free loopback port
  // "c10d": one agent hosts the embedded TCP store at the rendezvous endpoint;
  // "etcd": agents meet in etcd v3 at the endpoint (launch/agent_stores.h).
  std::string rdzv_backend = "c10d";
  std::string rdzv_host = "127.0.0.1";
  int rdzv_port = 29500;
  // --rdzv-id; when not given, a random id on one node, one derived from the store secret on
  // several (never a guessable default such as torchrun's "none").
  std::string rdzv_id;
  // The run's store secret (dist/store_secret.h): --rdzv-conf token= / token_file=, else
  // PET_RDZV_TOKEN, else SHARDTRAIN_STORE_SECRET (a Kubernetes Secret), else generated (one
  // node). Empty with etcd when none was given: the agents
  // then share a generated one through etcd (launch/agent_stores.h).
  std::string store_secret;
  // etcd security, torchelastic's --rdzv-conf keys: cacert, cert, key (TLS with client
  // certificates) and user, password (etcd authentication).
  EtcdTlsFiles etcd_tls;
  std::string etcd_user, etcd_password;
  int max_restarts = 0;
  std::chrono::milliseconds stop_grace{5000};
  // The most a saving worker's grace may grow to, whatever its heartbeat says (stop_grace.h).
  std::chrono::milliseconds max_stop_grace{600000};
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
  std::string role = "default";  // --role: the workers' ROLE_NAME
  // How often the agent checks its workers (--monitor-interval).
  std::chrono::milliseconds monitor_interval{200};
  // Per local rank (missing = none): streams written to <log_dir>/.../<local rank>/std*.log.
  std::vector<StreamChoice> redirects, tee;
  std::string log_dir;  // --log-dir ("" = a fresh temporary directory when files are needed)
  // Local ranks whose output reaches the console; empty = the default (launch/launcher.h).
  std::vector<int> local_ranks_filter;
  // The worker argv, resolved (launch/worker_command.h): argv[0] is a path.
  std::vector<std::string> command;
  // The worker runs this binary's own subcommand (it publishes heartbeats, saves on SIGTERM).
  bool shardtrain_worker = false;
};

// Looks up an environment variable (dist/worker_env.h); injected so tests need not touch the
// real environment.
using shardtrain::EnvLookup;
using shardtrain::process_env;

// Merges flags with PET_* variables, validates, and resolves `auto` and the endpoint.
LaunchConfig resolve_launch_config(const LaunchFlags& flags, const EnvLookup& env);

// GPUs on this host: `nvidia-smi -L` line count, else /dev/nvidia<N> device count, else 0.
int count_local_gpus();

}  // namespace shardtrain::launch
