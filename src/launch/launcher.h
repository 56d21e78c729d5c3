// The launcher agent: one per node. It rendezvouses with the other nodes' agents through the
// store, starts this node's workers, watches them and restarts the whole group on failure.
//
// Rendezvous (fixed size): node 0's agent hosts the TcpStore at the rendezvous endpoint
// (a free loopback port with --standalone). Keys live under "rdzv/<run id>/round/<r>/", where
// r is the restart count, so every attempt starts from fresh keys:
//   node/<i>/claim  compare_set by node i's agent (a second agent with the same rank is refused)
//   node/<i>        node i's process count; all agents wait for nodes 0..nnodes-1
//   failed          "restart|<what>" or "stop|<what>", first failure wins; every agent polls it
//   done, left      counters: nodes whose workers all exited 0; agents that have finished
// Global ranks are numbered node by node: node i's first rank is the sum of the process
// counts of nodes 0..i-1.
//
// Failure handling: when a worker exits non-zero or by a signal (or another node posts a
// failure), the agent sends SIGTERM to all its workers, SIGKILL after --stop-grace, reaps
// them, and starts round r+1 while r < --max-restarts; otherwise it exits 1 after printing one
// line naming the rank and its exit code or signal. SIGINT/SIGTERM to the agent are forwarded
// to the workers and end the run on every node without restart (exit 128 + signal).
//
// Hangs: node 0's agent runs a Watchdog (launch/watchdog.h) over the workers' heartbeats; when
// no rank has made progress for --watchdog-timeout it posts "restart|<report naming the rank,
// step and phase>" as the round's failure, handled like a worker failure above.
#pragma once

#include <string>
#include <vector>

#include "launch/launch_config.h"

namespace shardtrain::launch {

// Runs the agent until the group succeeds (0), fails for good (1) or is interrupted
// (128 + signal). Throws Error for rendezvous failures (store unreachable, duplicate rank).
int run_agent(const LaunchConfig& config);

// A one-node standalone launch of `nproc` workers running the shardtrain subcommand
// `worker_args` (e.g. {"train", "--config", "job.toml"}). Used by `train --nproc-per-node`.
int launch_local_workers(int nproc, const std::vector<std::string>& worker_args);

// This process's own arguments (from /proc/self/cmdline, without argv[0]) with `option` and
// its value removed, both as "--opt V" and "--opt=V": the worker command for a re-exec.
std::vector<std::string> own_args_without(const std::string& option);

}  // namespace shardtrain::launch
