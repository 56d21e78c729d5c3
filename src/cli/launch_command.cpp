// `shardtrain launch`: the torchrun-compatible per-node agent (launch/launcher.h).
// Flags are taken as strings and validated by launch/launch_config, so every bad value ends in
// one error line naming the flag (exit 2), whether it came from the command line or PET_*.
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "launch/launch_config.h"
#include "launch/launcher.h"

namespace shardtrain::cli {

void add_launch_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<launch::LaunchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Start this node's workers (torchrun-compatible): shardtrain launch [flags] -- <subcommand "
      "and its args>, e.g. shardtrain launch --nproc-per-node 4 -- train --config job.toml. A "
      "worker command whose first word contains '/' is run as an executable. Every flag can "
      "also come from its PET_* variable (PET_NNODES, ...), as under a Kubeflow PyTorchJob; "
      "flags win. See docs/launcher.md");
  const auto option = [&](const char* name, std::optional<std::string>& target, const char* help) {
    cmd->add_option_function<std::string>(
        name, [&target](const std::string& v) { target = v; }, help);
  };
  option("--nnodes", flags->nnodes,
         "number of nodes: N, or MIN:MAX (elastic: start once MAX nodes joined, or "
         "last_call_timeout after MIN did; re-form without nodes that leave) [PET_NNODES, "
         "default 1]");
  option("--nproc-per-node,--nproc_per_node", flags->nproc_per_node,
         "workers on this node: N, auto (one per GPU, 1 without GPUs), gpu or cpu "
         "[PET_NPROC_PER_NODE, default 1]");
  option("--node-rank,--node_rank", flags->node_rank,
         "this node's rank, 0..nnodes-1: orders the nodes when the group first forms; with the "
         "c10d backend node 0 hosts the store [PET_NODE_RANK; default: assigned in join order, "
         "the node the endpoint names hosts]");
  option("--rdzv-endpoint,--rdzv_endpoint", flags->rdzv_endpoint,
         "HOST:PORT of the store on node 0, or of etcd with --rdzv-backend etcd "
         "[PET_RDZV_ENDPOINT; default "
         "MASTER_ADDR:MASTER_PORT]");
  option("--rdzv-id,--rdzv_id", flags->rdzv_id,
         "run id shared by all nodes of one job [PET_RDZV_ID, default none]");
  option("--rdzv-backend,--rdzv_backend", flags->rdzv_backend,
         "c10d, static or tcp: the embedded TCP store; etcd: etcd v3 at --rdzv-endpoint "
         "[PET_RDZV_BACKEND]");
  option("--rdzv-conf,--rdzv_conf", flags->rdzv_conf,
         "key=value,...: join_timeout=SECONDS (wait for MIN nodes, default 600), "
         "last_call_timeout=SECONDS (wait for more once MIN joined, default 30), "
         "keep_alive_interval=SECONDS (default 5) and keep_alive_max_attempt=N (default 3): a "
         "node silent for their product has left [PET_RDZV_CONF]");
  option("--max-restarts,--max_restarts", flags->max_restarts,
         "restarts of the worker group after a failure or a node leaving [PET_MAX_RESTARTS, "
         "default 0]");
  option("--master-addr,--master_addr", flags->master_addr,
         "store host when --rdzv-endpoint is not given [PET_MASTER_ADDR, default 127.0.0.1]");
  option("--master-port,--master_port", flags->master_port,
         "store port when --rdzv-endpoint is not given [PET_MASTER_PORT, default 29500]");
  option("--stop-grace", flags->stop_grace,
         "seconds between SIGTERM and SIGKILL when stopping workers [default 5]");
  option("--watchdog-timeout,--watchdog_timeout", flags->watchdog_timeout,
         "seconds without progress of any rank (heartbeats) before the group is reported and "
         "restarted; 0 = off [PET_WATCHDOG_TIMEOUT, default 120]");
  // The node's Prometheus endpoint, served by this agent for all of its workers.
  auto metrics = std::make_shared<MetricsOptions>();
  cmd->add_option("--metrics-port", metrics->port,
                  "serve Prometheus /metrics (training metrics of every local rank, GPU "
                  "metrics under DCGM names) on PORT; 0 = a free port [default: off]")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-address", metrics->address,
                  "address the /metrics endpoint binds [default 0.0.0.0]");
  cmd->add_option("--metrics-gpu", metrics->gpu,
                  "true/false: GPU metrics from NVML (false where dcgm-exporter runs) "
                  "[default true]");
  cmd->add_option("--metrics-gpu-interval", metrics->gpu_interval_s,
                  "seconds between GPU metric samples [default 1]")
      ->check(CLI::Range(0.05, 3600.0));
  cmd->add_flag("--standalone", flags->standalone,
                "single node: host the store on a free local port [PET_STANDALONE]");
  // Everything from the first word that is not a launcher flag (or after --) is the worker
  // command, passed through untouched.
  // CLI11 hands words after "--" to a positional; words without "--" arrive as remaining().
  auto after_dashes = std::make_shared<std::vector<std::string>>();
  cmd->add_option("command", *after_dashes, "the worker command (after --)");
  cmd->prefix_command();
  cmd->allow_extras();
  cmd->callback([cmd, flags, after_dashes, metrics, &exit_code] {
    flags->command = *after_dashes;
    std::vector<std::string> rest = cmd->remaining();
    // CLI11 2.x also reports the "--" separator itself, after the positional words.
    if (!after_dashes->empty() && !rest.empty() && rest.back() == "--") rest.pop_back();
    for (const std::string& word : rest) flags->command.push_back(word);
    exit_code =
        launch::run_agent(launch::resolve_launch_config(*flags, launch::process_env()), *metrics);
  });
}

}  // namespace shardtrain::cli
