#include "launch/doctor/nccl_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "launch/doctor/rendezvous_checks.h"

namespace shardtrain::doctor {
namespace {

constexpr double kFloorEfa = 10, kFloorIb = 10, kFloorSocket = 0.5;  // inter-node, GB/s
constexpr double kFloorP2p = 20, kFloorShm = 2;                      // inside a node

const NodeCommRow* slowest_link(const NcclTestReport& report) {
  const NodeCommRow* slowest = nullptr;
  for (const NodeCommRow& row : report.rows) {
    if (row.link_busbw && (!slowest || *row.link_busbw < *slowest->link_busbw)) slowest = &row;
  }
  return slowest;
}

double median_link(const NcclTestReport& report) {
  std::vector<double> links;
  for (const NodeCommRow& row : report.rows) {
    if (row.link_busbw) links.push_back(*row.link_busbw);
  }
  if (links.empty()) return 0;
  std::sort(links.begin(), links.end());
  return links[links.size() / 2];
}

}  // namespace

nlohmann::json row_to_json(const NodeCommRow& row) {
  nlohmann::json j{{"node", row.node},
                   {"host", row.host},
                   {"ranks", row.ranks},
                   {"network", row.network},
                   {"paths", row.paths},
                   {"inter_node", row.inter_node},
                   {"intra_all_reduce_busbw_gbps", row.intra_all_reduce_busbw},
                   {"intra_all_gather_busbw_gbps", row.intra_all_gather_busbw},
                   {"link_peer", row.link_peer},
                   {"failed_checks", row.failed_checks},
                   {"failures", row.failures},
                   {"clock_after_barrier_s", row.clock_after_barrier_s}};
  j["link_busbw_gbps"] = row.link_busbw ? nlohmann::json(*row.link_busbw) : nlohmann::json();
  return j;
}

NodeCommRow row_from_json(const nlohmann::json& j) {
  try {
    NodeCommRow row;
    row.node = j.at("node").get<int>();
    row.host = j.at("host").get<std::string>();
    row.ranks = j.at("ranks").get<int>();
    row.network = j.at("network").get<std::string>();
    row.paths = j.at("paths").get<std::string>();
    row.inter_node = j.at("inter_node").get<std::string>();
    row.intra_all_reduce_busbw = j.at("intra_all_reduce_busbw_gbps").get<double>();
    row.intra_all_gather_busbw = j.at("intra_all_gather_busbw_gbps").get<double>();
    if (!j.at("link_busbw_gbps").is_null()) row.link_busbw = j["link_busbw_gbps"].get<double>();
    row.link_peer = j.at("link_peer").get<int>();
    row.failed_checks = j.at("failed_checks").get<int>();
    row.failures = j.at("failures").get<std::vector<std::string>>();
    row.clock_after_barrier_s = j.at("clock_after_barrier_s").get<double>();
    return row;
  } catch (const nlohmann::json::exception& e) {
    fail(
        "doctor: malformed node record from the NCCL test ({}); HINT: all nodes must run the "
        "same shardtrain version",
        e.what());
  }
}

nlohmann::json to_json(const NcclTestReport& report) {
  nlohmann::json rows = nlohmann::json::array();
  for (const NodeCommRow& row : report.rows) rows.push_back(row_to_json(row));
  return {{"backend", report.backend},
          {"world", report.world},
          {"nodes", report.nodes},
          {"message_bytes", report.message_bytes},
          {"all_reduce_busbw_gbps", report.all_reduce_busbw},
          {"all_gather_busbw_gbps", report.all_gather_busbw},
          {"all_reduce_algbw_gbps", report.all_reduce_algbw},
          {"rows", rows}};
}

NcclTestReport report_from_json(const nlohmann::json& j) {
  NcclTestReport report;
  try {
    report.backend = j.at("backend").get<std::string>();
    report.world = j.at("world").get<int>();
    report.nodes = j.at("nodes").get<int>();
    report.message_bytes = j.at("message_bytes").get<double>();
    report.all_reduce_busbw = j.at("all_reduce_busbw_gbps").get<double>();
    report.all_gather_busbw = j.at("all_gather_busbw_gbps").get<double>();
    report.all_reduce_algbw = j.at("all_reduce_algbw_gbps").get<double>();
    for (const nlohmann::json& row : j.at("rows")) report.rows.push_back(row_from_json(row));
  } catch (const nlohmann::json::exception& e) {
    fail("doctor: malformed NCCL test report ({})", e.what());
  }
  return report;
}

double bandwidth_floor_gbps(const std::string& inter_node, const std::string& paths,
                            bool multi_node) {
  if (multi_node) {
    if (inter_node == "efa") return kFloorEfa;
    if (inter_node == "ib") return kFloorIb;
    return kFloorSocket;
  }
  if (paths.find("P2P") != std::string::npos) return kFloorP2p;
  if (paths.find("SHM") != std::string::npos) return kFloorShm;
  return 0;
}

std::vector<CheckResult> judge_nccl_report(const NcclTestReport& report,
                                           std::optional<Transport> expect) {
  std::vector<CheckResult> checks;
  const bool multi_node = report.nodes > 1;
  const NodeCommRow* first = report.rows.empty() ? nullptr : &report.rows.front();
  const std::string inter = first ? first->inter_node : "";
  const std::string paths = first ? first->paths : "";
  std::string detail = fmt::format(
      "{} over {} rank(s) on {} node(s), {:.0f} MiB: all_reduce busbw {:.1f} GB/s, all_gather "
      "busbw {:.1f} GB/s",
      report.backend, report.world, report.nodes, report.message_bytes / (1 << 20),
      report.all_reduce_busbw, report.all_gather_busbw);
  if (report.world == 1) {
    detail += fmt::format(" (one rank: busbw is 0 by definition; algbw {:.1f} GB/s)",
                          report.all_reduce_algbw);
    checks.push_back(pass("nccl_test", detail));
  } else {
    const double floor = bandwidth_floor_gbps(inter, paths, multi_node);
    const double measured = std::min(report.all_reduce_busbw, report.all_gather_busbw);
    if (measured < floor) {
      checks.push_back(warn(
          "nccl_test",
          detail + fmt::format("; below the {:.1f} GB/s a healthy {} path gives", floor,
                               multi_node ? inter : paths),
          multi_node ? "check that every NIC is used (NCCL_SOCKET_IFNAME / NCCL_IB_HCA), EFA with "
                       "GPUDirect RDMA (FI_EFA_USE_DEVICE_RDMA=1) and that no other job saturates "
                       "the links"
                     : "check nvidia-smi topo -m (NVLink/PCIe peer access) and that "
                       "NCCL_P2P_DISABLE / NCCL_SHM_DISABLE are unset"));
    } else {
      checks.push_back(pass("nccl_test", detail));
    }
  }

  std::vector<std::string> mismatched;
  for (const NodeCommRow& row : report.rows) {
    if (expect && row.inter_node != transport_name(*expect)) {
      mismatched.push_back(fmt::format(
          "node {} ({}) used {}", row.node, row.host,
          row.inter_node.empty() ? "an unknown network ('" + row.network + "')" : row.inter_node));
    }
  }
  const std::string used =
      report.backend != "nccl"
          ? fmt::format("not NCCL: the {} test path ({})", report.backend, paths)
          : fmt::format("NCCL network {} ({}), paths {}", first ? first->network : "?",
                        multi_node ? "used between nodes" : "initialised; one node, so not used",
                        paths);
  if (!mismatched.empty()) {
    std::string text;
    for (const std::string& m : mismatched) text += (text.empty() ? "" : "; ") + m;
    checks.push_back(fail_check(
        "nccl_transport", used + "; --expect-transport " + transport_name(*expect) + ": " + text,
        "see the transport, nccl_net_plugin, libfabric and efa_devices / "
        "ib_devices checks for why NCCL fell back"));
  } else {
    checks.push_back(pass("nccl_transport", used));
  }

  if (const NodeCommRow* slow = slowest_link(report)) {
    const double floor = bandwidth_floor_gbps(slow->inter_node, slow->paths, true);
    const double median = median_link(report);
    const std::string detail = fmt::format(
        "slowest link node {} ({}) <-> node {}: {:.1f} GB/s all_reduce busbw (median link "
        "{:.1f} GB/s)",
        slow->node, slow->host, slow->link_peer, *slow->link_busbw, median);
    if (*slow->link_busbw < floor || *slow->link_busbw < median / 2) {
      checks.push_back(warn("nccl_links", detail,
                            fmt::format("run doctor on nodes {} and {} alone; check their NICs "
                                        "(ethtool, ibstat / fi_info -p efa) and cabling",
                                        slow->node, slow->link_peer)));
    } else {
      checks.push_back(pass("nccl_links", detail));
    }
  }
  if (multi_node && !report.rows.empty()) {
    const NodeCommRow* farthest = nullptr;
    double worst = 0;
    for (const NodeCommRow& row : report.rows) {
      const double offset = row.clock_after_barrier_s - report.rows.front().clock_after_barrier_s;
      if (!farthest || std::fabs(offset) > std::fabs(worst)) {
        farthest = &row;
        worst = offset;
      }
    }
    CheckResult clock = check_clock_offset(
        worst, fmt::format("node 0 ({}), for node {} ({}), the farthest of {} nodes",
                           report.rows.front().host, farthest->node, farthest->host, report.nodes));
    clock.name = "cluster_clock";
    checks.push_back(std::move(clock));
  }
  for (const NodeCommRow& row : report.rows) {
    if (row.failed_checks == 0 || row.node == 0) continue;
    std::string text;
    for (const std::string& f : row.failures) text += (text.empty() ? "" : "; ") + f;
    checks.push_back(
        fail_check(fmt::format("node_{}", row.node),
                   fmt::format("{}: {} check(s) failed: {}", row.host, row.failed_checks, text),
                   "run `shardtrain doctor` on that node for the hints"));
  }
  return checks;
}

std::string format_nccl_table(const NcclTestReport& report) {
  std::string text = fmt::format(
      "nccl test: {} ranks on {} node(s), {}, {:.0f} MiB messages; GB/s are bus bandwidth "
      "(nccl-tests)\n",
      report.world, report.nodes, report.backend, report.message_bytes / (1 << 20));
  text += fmt::format("{:>5} {:<24} {:>5} {:<16} {:<28} {:>10} {:>10} {:>14}\n", "node", "host",
                      "ranks", "network", "paths", "intra ar", "intra ag", "link ar");
  for (const NodeCommRow& row : report.rows) {
    text += fmt::format(
        "{:>5} {:<24} {:>5} {:<16} {:<28} {:>10.1f} {:>10.1f} {:>14}\n", row.node, row.host,
        row.ranks, row.network.empty() ? "?" : row.network, row.paths, row.intra_all_reduce_busbw,
        row.intra_all_gather_busbw,
        row.link_busbw ? fmt::format("{:.1f} (->{})", *row.link_busbw, row.link_peer) : "-");
  }
  text += fmt::format("all ranks: all_reduce {:.1f} GB/s, all_gather {:.1f} GB/s\n",
                      report.all_reduce_busbw, report.all_gather_busbw);
  if (const NodeCommRow* slow = slowest_link(report)) {
    text += fmt::format("slowest link: node {} ({}) <-> node {}, {:.1f} GB/s\n", slow->node,
                        slow->host, slow->link_peer, *slow->link_busbw);
  }
  return text;
}

}  // namespace shardtrain::doctor
