// `shardtrain doctor` as a user runs it on this (GPU-less) machine: it must say there is no GPU
// (FAIL, exit 1) without crashing, print one line per check with hints, emit JSON that parses,
// reject bad flags with exit 2, and run the measurement code of --nccl-test over CPU ranks
// (Gloo) under the launcher, on one and on two "nodes" on loopback.
#include <gtest/gtest.h>

#include <future>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "core/testing/test_support.h"
#include "dist/tcp_store.h"

namespace {

using Result = shardtrain::testing::CommandResult;
using shardtrain::testing::kBinary;

Result run(const std::string& args) {
  return shardtrain::testing::run_command(kBinary + " " + args);
}

bool has_line_starting(const Result& r, const std::string& prefix) {
  for (const std::string& line : r.lines())
    if (line.rfind(prefix, 0) == 0) return true;
  return false;
}

// A loopback port that was free a moment ago.
int free_port() {
  shardtrain::TcpStoreServer probe("127.0.0.1", 0, "port-probe-secret-0123");
  return probe.port();
}

// Launches `nodes` launchers on loopback as the nodes of one job, one CPU rank each, running
// the --nccl-test measurement over Gloo; returns each node's result, node 0 first.
std::vector<Result> run_cpu_cluster(int nodes) {
  const int port = free_port();
  const auto node = [&](int rank) {
    return run("launch --nnodes " + std::to_string(nodes) + " --node-rank " + std::to_string(rank) +
               " --nproc-per-node 1 --rdzv-endpoint 127.0.0.1:" + std::to_string(port) +
               " --rdzv-conf token=doctor-test-secret-0123456789" +  // several nodes need one
               " -- doctor --nccl-test --comm-test-device cpu " + "--nccl-test-mib 1");
  };
  std::vector<std::future<Result>> others;
  for (int rank = 1; rank < nodes; ++rank)
    others.push_back(std::async(std::launch::async, node, rank));
  std::vector<Result> results = {node(0)};
  for (auto& other : others) results.push_back(other.get());
  return results;
}

bool has_gpu() {
  return run("doctor --json").output.find("\"name\":\"gpus\",\"status\":\"fail\"") ==
         std::string::npos;
}

TEST(DoctorCli, NoGpuFailsWithExitOneAndHints) {
  if (has_gpu()) GTEST_SKIP() << "this machine has a GPU; the no-GPU report is for CI machines";
  const Result r = run("doctor --checkpoint-dir /tmp");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has_line_starting(r, "FAIL  gpus: no GPU")) << r.output;
  EXPECT_TRUE(has_line_starting(r, "      HINT: run on a GPU node")) << r.output;
  for (const char* name :
       {"gpu_health", "cuda_driver", "nccl", "nccl_net_plugin", "libfabric", "efa_devices",
        "ib_devices", "transport", "shm", "memlock", "hostname", "disk", "clock"}) {
    EXPECT_TRUE(
        std::regex_search(r.output, std::regex(std::string("(PASS|WARN|FAIL)  ") + name + ": ")))
        << name << "\n"
        << r.output;
  }
  EXPECT_NE(r.output.find("failed"), std::string::npos);
}

TEST(DoctorCli, JsonParses) {
  const Result r = run("doctor --json --expect-transport socket");
  const auto json = nlohmann::json::parse(r.output);  // the whole output is one object
  EXPECT_EQ(json["ok"].get<bool>(), r.exit_code == 0);
  ASSERT_TRUE(json["checks"].is_array());
  ASSERT_GE(json["checks"].size(), 12u);
  for (const auto& check : json["checks"]) {
    EXPECT_TRUE(check.contains("name") && check.contains("detail") && check.contains("hint"));
    const std::string status = check["status"];
    EXPECT_TRUE(status == "pass" || status == "warn" || status == "fail") << status;
  }
  if (!has_gpu()) {
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_EQ(json["checks"][0]["name"], "gpus");
    EXPECT_EQ(json["checks"][0]["status"], "fail");
  }
}

TEST(DoctorCli, UsageErrorsExitTwo) {
  const Result bad_transport = run("doctor --expect-transport tcp");
  EXPECT_EQ(bad_transport.exit_code, 2) << bad_transport.output;
  EXPECT_NE(bad_transport.output.find("--expect-transport"), std::string::npos);
  const Result bad_endpoint = run("doctor --rdzv-endpoint 127.0.0.1:notaport");
  EXPECT_EQ(bad_endpoint.exit_code, 2) << bad_endpoint.output;
  EXPECT_EQ(bad_endpoint.error_lines().size(), 1u) << bad_endpoint.output;
  EXPECT_NE(bad_endpoint.output.find("--rdzv-endpoint '127.0.0.1:notaport'"), std::string::npos);
  EXPECT_EQ(run("doctor --config /nonexistent.toml").exit_code, 2);
}

TEST(DoctorCli, UnreachableRendezvousFails) {
  const int port = free_port();
  const Result r =
      run("doctor --network-timeout 0.3 --rdzv-endpoint 127.0.0.1:" + std::to_string(port));
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(
      has_line_starting(r, "FAIL  rendezvous: TCP store at 127.0.0.1:" + std::to_string(port)))
      << r.output;
}

TEST(DoctorCli, NcclTestWithoutGpuFailsClearly) {
  if (has_gpu()) GTEST_SKIP() << "this machine has a GPU";
  const Result r = run("doctor --nccl-test");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(has_line_starting(r, "FAIL  nccl_test: not run: ")) << r.output;
}

// The measurement and table code over Gloo: 2 CPU ranks on one node.
TEST(DoctorCli, CommTestOverCpuRanksPrintsTheTable) {
  const Result r =
      run("launch --standalone --nproc-per-node 2 -- doctor --nccl-test "
          "--comm-test-device cpu --nccl-test-mib 1");
  EXPECT_NE(r.output.find("nccl test: 2 ranks on 1 node(s), gloo"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("PASS  nccl_test: gloo over 2 rank(s) on 1 node(s)"), std::string::npos)
      << r.output;
  EXPECT_TRUE(std::regex_search(r.output, std::regex(R"(all ranks: all_reduce [0-9.]+ GB/s)")))
      << r.output;
}

// Two launchers on loopback as two nodes of one CPU rank each: one row per node and the link
// between them, printed once by rank 0.
TEST(DoctorCli, CommTestOverTwoNodesNamesTheLink) {
  const std::vector<Result> results = run_cpu_cluster(2);
  const Result& r0 = results[0];
  const Result& r1 = results[1];
  EXPECT_NE(r0.output.find("nccl test: 2 ranks on 2 node(s), gloo"), std::string::npos)
      << r0.output;
  EXPECT_TRUE(std::regex_search(
      r0.output, std::regex(R"(slowest link: node 0 \(.*\) <-> node 1, [0-9.]+ GB/s)")))
      << r0.output;
  EXPECT_NE(r0.output.find("nccl_links: slowest link node 0"), std::string::npos) << r0.output;
  // Both "nodes" share this machine's clock.
  EXPECT_NE(r0.output.find("PASS  cluster_clock: "), std::string::npos) << r0.output;
  EXPECT_EQ(r1.output.find("nccl test:"), std::string::npos) << "only rank 0 prints the table\n"
                                                             << r1.output;
  EXPECT_EQ(r0.exit_code, r1.exit_code);
}

// Three nodes: each neighbouring pair measures its link (node 2's link wraps to node 0), and
// the failed checks of nodes 1 and 2 (no GPU here) fail the cluster's report on rank 0.
TEST(DoctorCli, CommTestOverThreeNodesMeasuresEveryLink) {
  const Result r0 = run_cpu_cluster(3)[0];
  EXPECT_NE(r0.output.find("nccl test: 3 ranks on 3 node(s), gloo"), std::string::npos)
      << r0.output;
  for (const char* link : {"(->1)", "(->2)", "(->0)"}) {
    EXPECT_NE(r0.output.find(link), std::string::npos) << link << "\n" << r0.output;
  }
  if (!has_gpu()) {
    EXPECT_NE(r0.output.find("FAIL  node_1: "), std::string::npos) << r0.output;
    EXPECT_NE(r0.output.find("FAIL  node_2: "), std::string::npos) << r0.output;
  }
}

}  // namespace
