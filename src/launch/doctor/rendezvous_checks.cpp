#include "launch/doctor/rendezvous_checks.h"

#include <fmt/format.h>

#include <cmath>
#include <thread>

#include "core/error.h"
#include "dist/etcd_store.h"
#include "dist/tcp_store.h"
#include "dist/tcp_store_wire.h"

namespace shardtrain::doctor {
namespace {

const char* const kUnreachableHint =
    "start the rendezvous first (node 0's `shardtrain launch`, or etcd), check --rdzv-endpoint, "
    "DNS, security groups / NetworkPolicy and that the port is open";
const char* const kSecretHint =
    "give every node the run's secret (the same --rdzv-conf token= / token_file=, "
    "PET_RDZV_TOKEN or SHARDTRAIN_STORE_SECRET; in Kubernetes the Secret <job>-store-secret)";
constexpr std::chrono::milliseconds kLeaderRetry{200};

}  // namespace

CheckResult check_clock_offset(double offset_seconds, const std::string& reference) {
  const char* name = "clock";
  const std::string detail =
      fmt::format("this node's clock is {:+.1f} s from {}", offset_seconds, reference);
  const std::string hint =
      "run chrony or systemd-timesyncd on every node (AWS: the Amazon Time Sync Service at "
      "169.254.169.123); skewed clocks misorder logs and checkpoints across nodes";
  if (std::fabs(offset_seconds) > 60) return fail_check(name, detail, hint);
  if (std::fabs(offset_seconds) > 2) return warn(name, detail, hint);
  return pass(name, detail);
}

CheckResult clock_not_compared(const std::string& why) {
  return warn("clock", "not compared: " + why,
              "give --rdzv-backend etcd --rdzv-endpoint HOST:PORT to compare with etcd's clock; "
              "make sure chrony or systemd-timesyncd runs on every node");
}

std::vector<CheckResult> check_rendezvous(const RendezvousTarget& target,
                                          std::chrono::milliseconds timeout) {
  const std::string endpoint = tcp_store_wire::format_endpoint(target.host, target.port);
  if (target.backend != "etcd") {
    try {
      TcpStoreClient client(target.host, target.port, timeout, target.store_secret);
      const auto start = std::chrono::steady_clock::now();
      client.ping();
      const double ms =
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
      return {pass("rendezvous",
                   fmt::format("TCP store at {} answers ({:.1f} ms round trip)", endpoint, ms)),
              clock_not_compared("the TCP store carries no clock")};
    } catch (const Error& e) {
      // The store answered but refused this node's secret: reachable, but this node could not
      // join the run.
      const bool refused = std::string(e.what()).find("refused this client") != std::string::npos;
      return {fail_check("rendezvous", fmt::format("TCP store at {}: {}", endpoint, e.what()),
                         refused ? kSecretHint : kUnreachableHint),
              clock_not_compared("the rendezvous is unreachable")};
    }
  }
  try {
    EtcdStore etcd(target.host, target.port, "/shardtrain-doctor/", {});
    // A member that has just started, or a cluster in an election, has no leader for about an
    // election timeout (1 s by default): ask again within the timeout before calling it lost.
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    EtcdStore::ServerStatus status = etcd.server_status(timeout);
    while (status.leader == "0" && std::chrono::steady_clock::now() + kLeaderRetry < deadline) {
      std::this_thread::sleep_for(kLeaderRetry);
      status = etcd.server_status(timeout);
    }
    std::vector<CheckResult> results;
    const std::string detail =
        fmt::format("etcd {} at {} ({} ms round trip), leader {}", status.version, endpoint,
                    status.round_trip.count(), status.leader);
    if (status.leader == "0") {
      results.push_back(fail_check("rendezvous", detail + ": no leader",
                                   "etcd has lost quorum: check its members (etcdctl endpoint "
                                   "status --cluster)"));
    } else if (!status.errors.empty()) {
      std::string alarms;
      for (const std::string& e : status.errors) alarms += (alarms.empty() ? "" : "; ") + e;
      results.push_back(fail_check("rendezvous", detail + ": " + alarms,
                                   "clear etcd's alarms (etcdctl alarm list / disarm; NOSPACE: "
                                   "compact and defragment)"));
    } else {
      results.push_back(pass("rendezvous", detail));
    }
    if (!status.server_date) {
      results.push_back(clock_not_compared("etcd's response had no Date header"));
    } else {
      // Date truncates to the second: the server's time lies in [date, date + 1 s).
      const double offset =
          std::chrono::duration<double>(status.local_midpoint - *status.server_date).count() - 0.5;
      results.push_back(check_clock_offset(offset, "etcd at " + endpoint + " (+-0.5 s)"));
    }
    return results;
  } catch (const Error& e) {
    return {fail_check("rendezvous", e.what(), kUnreachableHint),
            clock_not_compared("etcd is unreachable")};
  }
}

}  // namespace shardtrain::doctor
