// HeartbeatRecord: what a worker publishes about its progress (train/heartbeat.h writes it,
// the launcher's watchdog and stop logic read it: launch/watchdog.h, launch/agent.cpp). One
// encoder and one decoder, so the two sides cannot disagree.
//
// Stored under store_keys::heartbeat(rank) in the attempt's scope, as one line:
//   "<step> <unix ms> <phase> <last save ms> <detail>"
// step: the optimizer step the rank is in; unix ms: the time of its last progress; phase: one
// token of HeartbeatPhase; last save ms: how long the rank's last checkpoint save took (0 =
// none yet); detail: free text (the collective's context, e.g. "unit 3 (layers.2) parameter
// all-gather"), possibly empty, possibly with spaces.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace shardtrain {

enum class HeartbeatPhase {
  kStepStart,        // "step_start": at a step boundary
  kInCollective,     // "collective": waiting in a collective (detail: "all_gather: <context>")
  kAfterCollective,  // "compute": computing after a collective returned (same detail)
  kSaving,           // "saving": writing a checkpoint (the launcher lets it finish on stop)
};

struct HeartbeatRecord {
  int64_t step = 0;
  int64_t unix_ms = 0;
  HeartbeatPhase phase = HeartbeatPhase::kStepStart;
  int64_t last_save_ms = 0;
  std::string detail;

  // Whether the rank waits for its peers (a hang there is someone else's fault).
  bool waits_in_collective() const { return phase == HeartbeatPhase::kInCollective; }
  // The phase in words for reports: "all_gather: unit 3 ...", "compute after all_gather: ...",
  // "compute at step start", "saving a checkpoint".
  std::string describe() const;
};

std::string encode_heartbeat(const HeartbeatRecord& record);
// nullopt when `value` is not a record (malformed numbers, unknown phase).
std::optional<HeartbeatRecord> decode_heartbeat(const std::string& value);

}  // namespace shardtrain
