// `doctor --nccl-test`: all-reduce and all-gather bus bandwidth over this job's ranks, measured
// with dist/comm_bandwidth (the code `bench comm` uses), and the transport NCCL really used,
// read from its own init log (nccl_log.h; NCCL_DEBUG=INFO is set for this process, the log goes
// to a temporary directory this process creates and removes).
//
// Every rank of a launched group runs run_comm_test_rank; a process that is not under the
// launcher (WORLD_SIZE unset or 1) is a one-rank world with its own loopback store. With
// several nodes (ranks are numbered node by node, LOCAL_WORLD_SIZE per node) each node's ranks
// also measure among themselves (a split per node), and each pair of neighbouring nodes (i,
// i + 1 mod N) measures its link (one split per pair; 2 nodes: the world is the link). The first
// rank of each node posts its node's row, with its failed node checks and its clock read after a
// barrier of all ranks (so the nodes' clocks can be compared), in the store; rank 0
// builds the report, hands it to `on_report` (which prints and returns the exit code) and posts
// that code, which every rank returns.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dist/dist_env.h"
#include "dist/worker_env.h"
#include "launch/doctor/check_result.h"
#include "launch/doctor/nccl_report.h"

namespace shardtrain::doctor {

struct CommTestOptions {
  std::string device = "cuda";  // "cpu": Gloo over CPU ranks (the CI test path of this code)
  double message_mib = 128;
  int warmup = 3, iterations = 10;
};

// REQUIRES: every rank calls it with the same options. `node_checks`: this node's doctor checks
// (read on local rank 0 only; may be empty). Throws Error when the ranks cannot connect.
int run_comm_test_rank(const WorkerEnv& env, const CommTestOptions& options,
                       const std::vector<CheckResult>& node_checks,
                       const std::function<int(const NcclTestReport&)>& on_report);

}  // namespace shardtrain::doctor
