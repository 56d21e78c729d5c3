// The result of one `shardtrain doctor` check, and the two ways the report is printed.
//
// Text: one line per check, "PASS  name: detail", and for WARN/FAIL a second, indented line
// "      HINT: what to do". JSON: {"ok": bool, "checks": [{"name", "status": "pass|warn|fail",
// "detail", "hint"}]}, one object, for automation. ok = no check failed.
#pragma once

#include <string>
#include <vector>

namespace shardtrain::doctor {

enum class CheckStatus { kPass, kWarn, kFail };

struct CheckResult {
  std::string name;  // stable identifier, e.g. "shm", "nccl_net_plugin"
  CheckStatus status = CheckStatus::kPass;
  std::string detail;  // what was found
  std::string hint;    // what to do (empty for PASS)
};

inline CheckResult pass(std::string name, std::string detail) {
  return {std::move(name), CheckStatus::kPass, std::move(detail), ""};
}
inline CheckResult warn(std::string name, std::string detail, std::string hint) {
  return {std::move(name), CheckStatus::kWarn, std::move(detail), std::move(hint)};
}
inline CheckResult fail_check(std::string name, std::string detail, std::string hint) {
  return {std::move(name), CheckStatus::kFail, std::move(detail), std::move(hint)};
}

const char* status_word(CheckStatus status);          // "pass", "warn", "fail"
bool all_ok(const std::vector<CheckResult>& checks);  // no kFail
std::string format_text_report(const std::vector<CheckResult>& checks);
std::string format_json_report(const std::vector<CheckResult>& checks);  // one line

}  // namespace shardtrain::doctor
