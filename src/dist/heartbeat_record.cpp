#include "dist/heartbeat_record.h"

#include <array>
#include <charconv>
#include <utility>

namespace shardtrain {
namespace {

constexpr std::array<std::pair<HeartbeatPhase, const char*>, 4> kPhaseTokens = {{
    {HeartbeatPhase::kStepStart, "step_start"},
    {HeartbeatPhase::kInCollective, "collective"},
    {HeartbeatPhase::kAfterCollective, "compute"},
    {HeartbeatPhase::kSaving, "saving"},
}};

const char* token_of(HeartbeatPhase phase) {
  for (const auto& [p, token] : kPhaseTokens) {
    if (p == phase) return token;
  }
  return "step_start";
}

bool parse_int64(const std::string& text, int64_t& out) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return !text.empty() && ec == std::errc() && end == text.data() + text.size();
}

// The next space-separated field of `value` from `pos` (advanced past it and its space).
std::optional<std::string> next_field(const std::string& value, size_t& pos) {
  if (pos > value.size()) return std::nullopt;
  const size_t space = value.find(' ', pos);
  const size_t end = space == std::string::npos ? value.size() : space;
  std::string field = value.substr(pos, end - pos);
  pos = space == std::string::npos ? value.size() + 1 : space + 1;
  return field;
}

}  // namespace

std::string HeartbeatRecord::describe() const {
  switch (phase) {
    case HeartbeatPhase::kStepStart:
      return "compute at step start";
    case HeartbeatPhase::kInCollective:
      return detail;
    case HeartbeatPhase::kAfterCollective:
      return "compute after " + detail;
    case HeartbeatPhase::kSaving:
      return detail.empty() ? "saving a checkpoint" : "saving a checkpoint: " + detail;
  }
  return detail;
}

std::string encode_heartbeat(const HeartbeatRecord& record) {
  return std::to_string(record.step) + " " + std::to_string(record.unix_ms) + " " +
         token_of(record.phase) + " " + std::to_string(record.last_save_ms) + " " + record.detail;
}

std::optional<HeartbeatRecord> decode_heartbeat(const std::string& value) {
  HeartbeatRecord out;
  size_t pos = 0;
  const auto step = next_field(value, pos);
  const auto unix_ms = next_field(value, pos);
  const auto phase = next_field(value, pos);
  const auto save_ms = next_field(value, pos);
  if (!step || !unix_ms || !phase || !save_ms) return std::nullopt;
  if (!parse_int64(*step, out.step) || !parse_int64(*unix_ms, out.unix_ms) ||
      !parse_int64(*save_ms, out.last_save_ms)) {
    return std::nullopt;
  }
  bool known = false;
  for (const auto& [p, token] : kPhaseTokens) {
    if (*phase == token) {
      out.phase = p;
      known = true;
    }
  }
  if (!known) return std::nullopt;
  if (pos <= value.size()) out.detail = value.substr(pos);
  return out;
}

}  // namespace shardtrain
