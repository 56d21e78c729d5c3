// The parts of doctor around the node checks: the text and JSON reports, NCCL's init log read
// for the transport it used, the NCCL test's judgement and table (slowest link named), and the
// rendezvous and clock checks against a real TCP store on loopback.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "dist/tcp_store.h"
#include "launch/doctor/check_result.h"
#include "launch/doctor/nccl_log.h"
#include "launch/doctor/nccl_report.h"
#include "launch/doctor/rendezvous_checks.h"

namespace shardtrain::doctor {
namespace {

TEST(Report, TextHasOneLinePerCheckAndHints) {
  const std::vector<CheckResult> checks = {pass("gpus", "1 GPU(s)"),
                                           warn("clock", "not compared", "run chrony"),
                                           fail_check("shm", "/dev/shm 64.0 MiB", "mount more")};
  EXPECT_EQ(format_text_report(checks),
            "PASS  gpus: 1 GPU(s)\n"
            "WARN  clock: not compared\n"
            "      HINT: run chrony\n"
            "FAIL  shm: /dev/shm 64.0 MiB\n"
            "      HINT: mount more\n"
            "doctor: 3 checks, 1 failed, 1 warned: this node cannot train as configured\n");
  EXPECT_FALSE(all_ok(checks));
  EXPECT_TRUE(all_ok({checks[0], checks[1]}));
}

TEST(Report, JsonParsesWithTheDocumentedFields) {
  const auto json = nlohmann::json::parse(format_json_report(
      {pass("gpus", "ok"), fail_check("nccl", "libnccl.so.2 \xff missing", "install it")}));
  EXPECT_EQ(json["ok"], false);
  ASSERT_EQ(json["checks"].size(), 2u);
  EXPECT_EQ(json["checks"][0]["status"], "pass");
  EXPECT_EQ(json["checks"][1]["name"], "nccl");
  EXPECT_EQ(json["checks"][1]["status"], "fail");
  EXPECT_EQ(json["checks"][1]["hint"], "install it");
  EXPECT_TRUE(json["checks"][1]["detail"].get<std::string>().find("missing") != std::string::npos);
}

// Excerpts of real NCCL 2.2x INFO logs.
const char* kTwoNodeIbLog =
    "node0:123:123 [0] NCCL INFO NET/Plugin: No plugin found (libnccl-net.so)\n"
    "node0:123:123 [0] NCCL INFO Using network IB\n"
    "node0:123:140 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read\n"
    "node0:123:140 [0] NCCL INFO Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0/GDRDMA\n";
const char* kEfaLog =
    "p5:1:1 [0] NCCL INFO NET/OFI Selected provider is efa, fabric is efa-direct (found 32 nics)\n"
    "p5:1:1 [0] NCCL INFO Using network AWS Libfabric\n"
    "p5:1:9 [0] NCCL INFO Channel 01/0 : 8[0] -> 0[0] [receive] via NET/AWS Libfabric/0/GDRDMA\n";
const char* kOneNodeSocketLog =
    "h200:7:7 [0] NCCL INFO Using network Socket\n"
    "h200:7:9 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct\n";

TEST(NcclLog, TransportsUsed) {
  const NcclLogTransports ib = parse_nccl_log(kTwoNodeIbLog);
  EXPECT_EQ(ib.network, "IB");
  EXPECT_EQ(ib.describe_paths(), "NET/IB+P2P");
  EXPECT_TRUE(ib.used_network());
  EXPECT_EQ(ib.inter_node(), Transport::kIb);

  const NcclLogTransports efa = parse_nccl_log(kEfaLog);
  EXPECT_EQ(efa.network, "AWS Libfabric");
  EXPECT_EQ(efa.describe_paths(), "NET/AWS Libfabric");
  EXPECT_TRUE(efa.ofi_efa_provider);
  EXPECT_EQ(efa.inter_node(), Transport::kEfa);

  const NcclLogTransports single = parse_nccl_log(kOneNodeSocketLog);
  EXPECT_FALSE(single.used_network());
  EXPECT_EQ(single.describe_paths(), "SHM");
  EXPECT_EQ(single.inter_node(), Transport::kSocket);  // the network NCCL initialised

  EXPECT_EQ(parse_nccl_log("nothing here\n").inter_node(), std::nullopt);
  EXPECT_EQ(parse_nccl_log("").describe_paths(), "none");
}

NodeCommRow row(int node, const std::string& inter, std::optional<double> link, int peer) {
  NodeCommRow r;
  r.node = node;
  r.host = "node" + std::to_string(node);
  r.ranks = 8;
  r.network = inter == "efa" ? "AWS Libfabric" : inter == "ib" ? "IB" : "Socket";
  r.paths = "NET/" + r.network + "+P2P";
  r.inter_node = inter;
  r.intra_all_reduce_busbw = 300;
  r.intra_all_gather_busbw = 280;
  r.link_busbw = link;
  r.link_peer = peer;
  r.clock_after_barrier_s = 1.7e9 + 0.01 * node;  // within 20 ms of each other
  return r;
}

NcclTestReport three_nodes() {
  NcclTestReport report;
  report.backend = "nccl";
  report.world = 24;
  report.nodes = 3;
  report.message_bytes = 128 << 20;
  report.all_reduce_busbw = 90;
  report.all_gather_busbw = 85;
  report.all_reduce_algbw = 47;
  report.rows = {row(0, "efa", 95, 1), row(1, "efa", 30, 2), row(2, "efa", 92, 0)};
  return report;
}

const CheckResult* find(const std::vector<CheckResult>& checks, const std::string& name) {
  for (const CheckResult& c : checks)
    if (c.name == name) return &c;
  return nullptr;
}

TEST(NcclReport, SlowestLinkNamedAndTransportCompared) {
  const std::vector<CheckResult> checks = judge_nccl_report(three_nodes(), Transport::kEfa);
  ASSERT_NE(find(checks, "nccl_test"), nullptr);
  EXPECT_EQ(find(checks, "nccl_test")->status, CheckStatus::kPass);
  EXPECT_EQ(find(checks, "nccl_transport")->status, CheckStatus::kPass);
  const CheckResult* links = find(checks, "nccl_links");
  ASSERT_NE(links, nullptr);
  EXPECT_EQ(links->status, CheckStatus::kWarn);  // 30 < half the median 92
  EXPECT_NE(links->detail.find("slowest link node 1 (node1) <-> node 2: 30.0 GB/s"),
            std::string::npos)
      << links->detail;
  const std::string table = format_nccl_table(three_nodes());
  EXPECT_NE(table.find("slowest link: node 1 (node1) <-> node 2, 30.0 GB/s"), std::string::npos)
      << table;
  EXPECT_NE(table.find("95.0 (->1)"), std::string::npos) << table;
}

TEST(NcclReport, FallbackToSocketsFailsAgainstExpectedEfa) {
  NcclTestReport report = three_nodes();
  report.rows[2] = row(2, "socket", 1.2, 0);
  const std::vector<CheckResult> checks = judge_nccl_report(report, Transport::kEfa);
  const CheckResult* transport = find(checks, "nccl_transport");
  EXPECT_EQ(transport->status, CheckStatus::kFail);
  EXPECT_NE(transport->detail.find("node 2 (node2) used socket"), std::string::npos)
      << transport->detail;
  EXPECT_EQ(judge_nccl_report(report, std::nullopt)[1].status, CheckStatus::kPass);
}

TEST(NcclReport, BandwidthFarBelowTheTransportWarns) {
  NcclTestReport report = three_nodes();
  report.all_reduce_busbw = 3;  // EFA should give well over 10 GB/s
  EXPECT_EQ(judge_nccl_report(report, std::nullopt)[0].status, CheckStatus::kWarn);
  NcclTestReport one_gpu;
  one_gpu.backend = "nccl";
  one_gpu.world = one_gpu.nodes = 1;
  one_gpu.rows = {row(0, "socket", std::nullopt, -1)};
  const CheckResult single = judge_nccl_report(one_gpu, std::nullopt)[0];
  EXPECT_EQ(single.status, CheckStatus::kPass);
  EXPECT_NE(single.detail.find("busbw is 0 by definition"), std::string::npos);
}

TEST(NcclReport, FailedChecksOfOtherNodesFailTheCluster) {
  NcclTestReport report = three_nodes();
  report.rows[1].failed_checks = 1;
  report.rows[1].failures = {"shm: /dev/shm 64.0 MiB"};
  const std::vector<CheckResult> checks = judge_nccl_report(report, std::nullopt);
  const CheckResult* node = find(checks, "node_1");
  ASSERT_NE(node, nullptr);
  EXPECT_EQ(node->status, CheckStatus::kFail);
  EXPECT_EQ(node->detail, "node1: 1 check(s) failed: shm: /dev/shm 64.0 MiB");
}

TEST(NcclReport, NodeClocksComparedWithNodeZero) {
  NcclTestReport report = three_nodes();
  const std::vector<CheckResult> close = judge_nccl_report(report, std::nullopt);
  ASSERT_NE(find(close, "cluster_clock"), nullptr);
  EXPECT_EQ(find(close, "cluster_clock")->status, CheckStatus::kPass);
  report.rows[1].clock_after_barrier_s -= 7;  // node 1 runs 7 s behind
  const std::vector<CheckResult> skewed = judge_nccl_report(report, std::nullopt);
  const CheckResult* clock = find(skewed, "cluster_clock");
  EXPECT_EQ(clock->status, CheckStatus::kWarn);
  EXPECT_NE(clock->detail.find("-7.0 s from node 0 (node0), for node 1 (node1)"), std::string::npos)
      << clock->detail;
  report.rows[2].clock_after_barrier_s += 90;
  const std::vector<CheckResult> far = judge_nccl_report(report, std::nullopt);
  EXPECT_EQ(find(far, "cluster_clock")->status, CheckStatus::kFail);
}

TEST(NcclReport, JsonRoundTrip) {
  const NcclTestReport back = report_from_json(to_json(three_nodes()));
  EXPECT_EQ(format_nccl_table(back), format_nccl_table(three_nodes()));
  EXPECT_FALSE(report_from_json(to_json(three_nodes())).rows[0].link_busbw == std::nullopt);
  EXPECT_THROW(report_from_json(nlohmann::json{{"backend", "nccl"}}), Error);
}

TEST(Rendezvous, TcpStoreReachableAndUnreachable) {
  int port = 0;
  {
    const std::string secret = "doctor-test-secret-0123";
    TcpStoreServer server("127.0.0.1", 0, secret);
    port = server.port();
    const std::vector<CheckResult> up =
        check_rendezvous({"c10d", "127.0.0.1", port, secret}, std::chrono::milliseconds(2000));
    ASSERT_EQ(up.size(), 2u);
    EXPECT_EQ(up[0].status, CheckStatus::kPass) << up[0].detail;
    EXPECT_NE(up[0].detail.find("TCP store at 127.0.0.1:" + std::to_string(port) + " answers"),
              std::string::npos);
    EXPECT_EQ(up[1].name, "clock");
    EXPECT_EQ(up[1].status, CheckStatus::kWarn);
    // Reachable, but this node's secret is not the run's: it could not join.
    const std::vector<CheckResult> refused = check_rendezvous(
        {"c10d", "127.0.0.1", port, "another-secret-0123456"}, std::chrono::milliseconds(2000));
    EXPECT_EQ(refused[0].status, CheckStatus::kFail);
    EXPECT_NE(refused[0].detail.find("refused"), std::string::npos) << refused[0].detail;
    EXPECT_NE(refused[0].hint.find("SHARDTRAIN_STORE_SECRET"), std::string::npos);
  }
  const std::vector<CheckResult> down =
      check_rendezvous({"c10d", "127.0.0.1", port}, std::chrono::milliseconds(300));
  EXPECT_EQ(down[0].status, CheckStatus::kFail);
  EXPECT_NE(down[0].hint.find("--rdzv-endpoint"), std::string::npos);
}

TEST(Clock, OffsetThresholds) {
  EXPECT_EQ(check_clock_offset(0.4, "etcd").status, CheckStatus::kPass);
  EXPECT_EQ(check_clock_offset(-5, "etcd").status, CheckStatus::kWarn);
  EXPECT_EQ(check_clock_offset(120, "etcd").status, CheckStatus::kFail);
  EXPECT_EQ(check_clock_offset(-5, "etcd at x").detail,
            "this node's clock is -5.0 s from etcd at x");
}

}  // namespace
}  // namespace shardtrain::doctor
