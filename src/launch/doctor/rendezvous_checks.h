// Doctor checks that need the network: the rendezvous endpoint and this node's clock.
//   rendezvous: c10d (the embedded TCP store: connect and one round trip) or etcd (v3
//               /v3/maintenance/status through dist/etcd_store: version, a leader, no alarms);
//               FAIL when unreachable or unhealthy
//   clock:      this node's wall clock against etcd's (HTTP Date, whole seconds, corrected by
//               half the round trip): PASS within 2 s, WARN beyond, FAIL beyond 60 s; WARN
//               "not compared" when there is nothing to compare with (no etcd reachable; the
//               TCP store carries no clock)
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launch/doctor/check_result.h"

namespace shardtrain::doctor {

struct RendezvousTarget {
  std::string backend;  // "c10d" (also static/tcp) or "etcd"
  std::string host;
  int port = 0;
  // The TCP store's secret as this node's launcher would present it (dist/store_secret.h);
  // unused with etcd.
  std::string store_secret;
};

// {rendezvous, clock}.
std::vector<CheckResult> check_rendezvous(const RendezvousTarget& target,
                                          std::chrono::milliseconds timeout);

// The clock check from a measured offset (seconds, this node minus the reference).
CheckResult check_clock_offset(double offset_seconds, const std::string& reference);
CheckResult clock_not_compared(const std::string& why);

}  // namespace shardtrain::doctor
