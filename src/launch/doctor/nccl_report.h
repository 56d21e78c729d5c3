// The result of `doctor --nccl-test` and how it is judged and printed: one row per node (its
// GPUs, the transports NCCL used, the all-reduce / all-gather bus bandwidth inside the node and
// over the link to the next node), the whole world's figures, and the checks derived from them:
//   nccl_test:      bus bandwidth of all-reduce and all-gather over all ranks; WARN when far
//                   below what the transport used should give (kFloors below)
//   nccl_transport: the inter-node transport NCCL used (from its log); FAIL when it differs
//                   from --expect-transport
//   nccl_links:     (several nodes) the slowest node-to-node link, named; WARN when below the
//                   transport's floor or under half of the median link
//   cluster_clock:  (several nodes) the node whose clock is farthest from node 0's, named;
//                   thresholds of the clock check (rendezvous_checks.h)
// Serialised as JSON between processes (the store, the report file of the local re-exec).
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "launch/doctor/check_result.h"
#include "launch/doctor/node_facts.h"

namespace shardtrain::doctor {

struct NodeCommRow {
  int node = 0;
  std::string host;
  int ranks = 0;                      // ranks (GPUs) on the node
  std::string network;                // NCCL's "Using network ..." on the node's first rank
  std::string paths;                  // e.g. "NET/IB+P2P"
  std::string inter_node;             // "efa" | "ib" | "socket" | "" (unknown)
  double intra_all_reduce_busbw = 0;  // GB/s among the node's ranks
  double intra_all_gather_busbw = 0;
  std::optional<double> link_busbw;   // all-reduce over this node and the next one, GB/s
  int link_peer = -1;                 // the next node
  int failed_checks = 0;              // the node's own doctor checks that failed
  std::vector<std::string> failures;  // their text lines
  // The node's wall clock (Unix seconds) read right after a barrier of all ranks: rank 0
  // compares the nodes' clocks with its own from it (within the barrier's exit skew, ~ms).
  double clock_after_barrier_s = 0;
};

struct NcclTestReport {
  std::string backend;  // "nccl", or "gloo" on the CPU test path
  int world = 0;
  int nodes = 0;
  double message_bytes = 0;
  double all_reduce_busbw = 0;  // GB/s over all ranks
  double all_gather_busbw = 0;
  double all_reduce_algbw = 0;
  std::vector<NodeCommRow> rows;
};

nlohmann::json to_json(const NcclTestReport& report);
// Throws Error when `json` is not a report (a corrupted file or store value).
NcclTestReport report_from_json(const nlohmann::json& json);
nlohmann::json row_to_json(const NodeCommRow& row);
NodeCommRow row_from_json(const nlohmann::json& json);

// The minimum bus bandwidth (GB/s) a healthy link of each kind gives; a measurement below it is
// "far below" what the transport should do.
double bandwidth_floor_gbps(const std::string& inter_node, const std::string& paths,
                            bool multi_node);

std::vector<CheckResult> judge_nccl_report(const NcclTestReport& report,
                                           std::optional<Transport> expect);

// The table rank 0 prints (one row per node, then the slowest link named).
std::string format_nccl_table(const NcclTestReport& report);

}  // namespace shardtrain::doctor
