// `shardtrain launch`: the torchrun-compatible per-node agent (launch/launcher.h).
// Flags are taken as strings and validated by launch/launch_config, so every bad value ends in
// one error line naming the flag (exit 2), whether it came from the command line or PET_*.
// The worker command (launch/worker_command.h) is everything from the first word that is not
// a launcher flag, or everything after "--", exactly as typed.
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/finite_range.h"
#include "cli/optional_option.h"
#include "launch/launch_config.h"
#include "launch/launcher.h"
#include "obs/metrics_endpoint.h"

namespace shardtrain::cli {
namespace {

// What "--" becomes (mark_launch_separator): CLI11 stops at it like at any positional word.
constexpr char kSeparatorMarker[] = "\x1e--";

void add_rendezvous_options(CLI::App* cmd, launch::LaunchFlags& flags) {
  add_optional_string(
      cmd, "--nnodes", flags.nnodes,
      "number of nodes: N, or MIN:MAX (elastic: start once MAX nodes joined, or "
      "last_call_timeout after MIN did; re-form without nodes that leave) [PET_NNODES, "
      "default 1]");
  add_optional_string(cmd, "--nproc-per-node,--nproc_per_node", flags.nproc_per_node,
                      "workers on this node: N, auto (one per GPU, 1 without GPUs), gpu or cpu "
                      "[PET_NPROC_PER_NODE, default 1]");
  add_optional_string(
      cmd, "--node-rank,--node_rank", flags.node_rank,
      "this node's rank, 0..nnodes-1: orders the nodes when the group first forms; with the "
      "c10d backend node 0 hosts the store [PET_NODE_RANK; default: assigned in join order, "
      "the node the endpoint names hosts]");
  add_optional_string(
      cmd, "--rdzv-endpoint,--rdzv_endpoint", flags.rdzv_endpoint,
      "HOST:PORT of the store on node 0, or of etcd with --rdzv-backend etcd "
      "[PET_RDZV_ENDPOINT; default MASTER_ADDR:MASTER_PORT, port 29400 (etcd 2379) if "
      "omitted]");
  add_optional_string(
      cmd, "--rdzv-id,--rdzv_id", flags.rdzv_id,
      "run id shared by all nodes of one job [PET_RDZV_ID, default none (--standalone: a "
      "random one)]");
  add_optional_string(cmd, "--rdzv-backend,--rdzv_backend", flags.rdzv_backend,
                      "c10d, static or tcp: the embedded TCP store; etcd (or etcd-v2): etcd v3 at "
                      "--rdzv-endpoint [PET_RDZV_BACKEND, default c10d]");
  add_optional_string(
      cmd, "--rdzv-conf,--rdzv_conf", flags.rdzv_conf,
      "key=value,...: join_timeout=SECONDS (wait for MIN nodes, default 600), "
      "last_call_timeout=SECONDS (wait for more once MIN joined, default 30), "
      "keep_alive_interval=SECONDS (default 5) and keep_alive_max_attempt=N (default 3): a "
      "node silent for their product has left [PET_RDZV_CONF]");
  add_optional_string(
      cmd, "--max-restarts,--max_restarts", flags.max_restarts,
      "restarts of the worker group after a failure or a node leaving [PET_MAX_RESTARTS, "
      "default 0]");
  add_optional_string(
      cmd, "--master-addr,--master_addr", flags.master_addr,
      "store host when --rdzv-endpoint is not given [PET_MASTER_ADDR, default 127.0.0.1]");
  add_optional_string(
      cmd, "--master-port,--master_port", flags.master_port,
      "store port when --rdzv-endpoint is not given [PET_MASTER_PORT, default 29500]");
  cmd->add_flag("--standalone", flags.standalone,
                "single node: host the store on a free local port [PET_STANDALONE, default off]");
}

void add_worker_options(CLI::App* cmd, launch::LaunchFlags& flags) {
  add_optional_string(
      cmd, "--stop-grace,--stop_grace", flags.stop_grace,
      "seconds between SIGTERM and SIGKILL when stopping workers; a worker that reports it "
      "is saving a checkpoint gets max(30, 2 x its last save time), up to --max-stop-grace "
      "[PET_STOP_GRACE, default 5]");
  add_optional_string(
      cmd, "--max-stop-grace,--max_stop_grace", flags.max_stop_grace,
      "the most seconds a saving worker is waited for after SIGTERM, whatever its heartbeat "
      "says [PET_MAX_STOP_GRACE, default 600]");
  add_optional_string(
      cmd, "--watchdog-timeout,--watchdog_timeout", flags.watchdog_timeout,
      "seconds without progress (shardtrain workers: heartbeats; other workers: a stopped "
      "process) before the group is reported and restarted; 0 = off [PET_WATCHDOG_TIMEOUT, "
      "default 120]");
  add_optional_string(cmd, "--monitor-interval,--monitor_interval", flags.monitor_interval,
                      "seconds between checks of the workers [PET_MONITOR_INTERVAL, default 0.2]");
  add_optional_string(
      cmd, "--tee", flags.tee,
      "copy worker output to <log-dir>/.../<local rank>/stdout.log and stderr.log as well as "
      "the console: 0 none, 1 stdout, 2 stderr, 3 both, or LOCAL:N,... [PET_TEE, default 0]");
  add_optional_string(cmd, "--redirects", flags.redirects,
                      "send worker output to those files instead of the console (values as --tee) "
                      "[PET_REDIRECTS, default 0]");
  add_optional_string(
      cmd, "--log-dir,--log_dir", flags.log_dir,
      "directory for per-rank logs and error files: <log-dir>/<run id>_<random>/attempt_<n>/"
      "<local rank>/ [PET_LOG_DIR, default a new directory under $TMPDIR or /tmp]");
  add_optional_string(
      cmd, "--local-ranks-filter,--local_ranks_filter", flags.local_ranks_filter,
      "local ranks whose output reaches the console, e.g. 0 or 0,1 [PET_LOCAL_RANKS_FILTER; "
      "default: local rank 0 for shardtrain subcommands (plus the last lines of a rank that "
      "fails), every rank for other commands, every rank teed with --tee]");
  add_optional_string(cmd, "--role", flags.role,
                      "the workers' ROLE_NAME [PET_ROLE, default 'default']");
  add_optional_string(
      cmd, "--start-method,--start_method", flags.start_method,
      "spawn, fork or forkserver: accepted for torchrun compatibility; workers always start "
      "as fresh processes (spawn) [default spawn]");
  add_optional_string(cmd, "--python", flags.python,
                      "interpreter for script.py and -m [default python3 on PATH]");
  add_optional_string(cmd, "-m,--module", flags.module,
                      "run a Python module as the worker: python -m MODULE ARGS");
  cmd->add_flag("--no-python,--no_python", flags.no_python,
                "the worker command is an executable, not a Python script [default off]");
}

// The node's Prometheus endpoint, served by this agent for all of its workers
// (launch/node_metrics.h); CLI11 checks the values (a bad one is one error line, exit 2).
void add_metrics_options(CLI::App* cmd, MetricsOptions& metrics) {
  cmd->add_option("--metrics-port,--metrics_port", metrics.port,
                  "serve Prometheus /metrics (training metrics of every local rank, GPU "
                  "metrics under DCGM names) on PORT; 0 = a free port [default: off]")
      ->check(CLI::Range(0, 65535));
  cmd->add_option("--metrics-address,--metrics_address", metrics.address,
                  "address the /metrics endpoint binds [default 0.0.0.0]");
  cmd->add_option("--metrics-gpu,--metrics_gpu", metrics.gpu,
                  "true/false: GPU metrics from NVML (false where dcgm-exporter runs) "
                  "[default true]");
  cmd->add_option("--metrics-gpu-interval,--metrics_gpu_interval", metrics.gpu_interval_s,
                  "seconds between GPU metric samples [default 1]")
      ->check(finite_range(0.05, 3600.0));
}

}  // namespace

void mark_launch_separator(std::vector<std::string>& args) {
  if (args.empty() || args.front() != "launch") return;
  for (std::string& word : args) {
    if (word == "--") {
      word = kSeparatorMarker;
      return;
    }
  }
}

void add_launch_command(CLI::App& app, int& exit_code) {
  auto flags = std::make_shared<launch::LaunchFlags>();
  CLI::App* cmd = app.add_subcommand(
      "launch",
      "Start this node's workers, torchrun-compatible: shardtrain launch [flags] script.py "
      "[args] runs a Python script (-m MODULE a module, --no-python an executable); "
      "shardtrain launch [flags] [--] train --config job.toml runs a shardtrain subcommand. "
      "Every flag can also come from its PET_* variable (PET_NNODES, ...), as under a Kubeflow "
      "PyTorchJob; flags win. Environment variables: docs/launcher.md");
  add_rendezvous_options(cmd, *flags);
  add_worker_options(cmd, *flags);
  auto metrics = std::make_shared<MetricsOptions>();
  add_metrics_options(cmd, *metrics);
  // The first word that is not a launcher flag starts the worker command: CLI11 stops there
  // and hands it and everything after it over untouched as remaining().
  cmd->prefix_command();
  cmd->callback([cmd, flags, metrics, &app, &exit_code] {
    std::vector<std::string> words = cmd->remaining();
    if (!words.empty() && words.front() == kSeparatorMarker) {
      words.erase(words.begin());
      flags->after_separator = true;
    }
    // A "--" inside the worker command is the worker's own: give it back.
    for (std::string& word : words) {
      if (word == kSeparatorMarker) word = "--";
    }
    flags->command = words;
    for (const CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) {
      flags->subcommands.push_back(sub->get_name());
    }
    exit_code =
        launch::run_agent(launch::resolve_launch_config(*flags, launch::process_env()), *metrics);
  });
}

}  // namespace shardtrain::cli
