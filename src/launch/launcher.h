// The launcher agent: one per node. It rendezvouses with the other nodes' agents through the
// store, starts this node's workers, watches them and restarts the whole group on failure.
//
// Rendezvous (launch/rendezvous.h): the agents form the group generation by generation. A
// generation closes when --nnodes MAX agents have joined, or, with MIN:MAX, last_call_timeout
// after MIN have; world size = the sum of the joined agents' worker counts; global ranks are
// numbered node by node in group order (a node keeps its place from one generation to the
// next). Each generation's keys ("gen/<g>/...") are fresh, so nothing of a failed attempt is
// read again.
//
// Failure handling: when a worker exits non-zero or by a signal, or another agent posts a
// failure in gen/<g>/failed, the agent sends SIGTERM to all its workers, SIGKILL after
// --stop-grace, reaps them, and, while the group's restart count is below --max-restarts,
// moves on to generation g+1 with the agents that come (the restarted workers resume from the
// newest checkpoint, at whatever world size the new group has); otherwise it exits 1 after
// printing one line naming the rank and its exit code or signal. SIGINT/SIGTERM to the agent
// are forwarded to the workers and end the run on every node without restart (exit
// 128 + signal).
//
// Membership: an agent that disappears without a word (SIGKILL, a lost node) is noticed by the
// others through launch/agent_liveness.h (a stale heartbeat in the TCP store, an expired etcd
// lease): one of them posts "node N (...) left the group" as the generation's failure, which
// restarts the group like a worker failure. An agent that arrives while a group smaller than
// MAX runs makes it re-form with the newcomer (not counted as a restart).
//
// Hangs: the agent with group rank 0 runs a Watchdog (launch/watchdog.h) over the workers'
// heartbeats; when no rank has made progress for --watchdog-timeout it posts "restart|<report
// naming the rank, step and phase>" as the generation's failure, handled like a worker failure.
#pragma once

#include <string>
#include <vector>

#include "launch/launch_config.h"
#include "obs/metrics_endpoint.h"

namespace shardtrain::launch {

// Runs the agent until the group succeeds (0), fails for good (1) or is interrupted
// (128 + signal). Throws Error for rendezvous failures (store unreachable, duplicate rank) and
// a metrics port that cannot be bound. With `metrics` enabled the agent serves the node's
// /metrics for all of its workers (launch/node_metrics.h).
int run_agent(const LaunchConfig& config, const MetricsOptions& metrics = {});

// A one-node standalone launch of `nproc` workers running the shardtrain subcommand
// `worker_args` (e.g. {"train", "--config", "job.toml"}). Used by `train --nproc-per-node`.
int launch_local_workers(int nproc, const std::vector<std::string>& worker_args,
                         const MetricsOptions& metrics = {});

// This process's own arguments (from /proc/self/cmdline, without argv[0]) with `option` and
// its value removed, both as "--opt V" and "--opt=V": the worker command for a re-exec.
std::vector<std::string> own_args_without(const std::string& option);

}  // namespace shardtrain::launch
