#include "launch/doctor/check_result.h"

#include <algorithm>
#include <cctype>
#include <nlohmann/json.hpp>

namespace shardtrain::doctor {

const char* status_word(CheckStatus status) {
  switch (status) {
    case CheckStatus::kPass:
      return "pass";
    case CheckStatus::kWarn:
      return "warn";
    case CheckStatus::kFail:
      return "fail";
  }
  return "?";
}

bool all_ok(const std::vector<CheckResult>& checks) {
  return std::none_of(checks.begin(), checks.end(),
                      [](const CheckResult& c) { return c.status == CheckStatus::kFail; });
}

std::string format_text_report(const std::vector<CheckResult>& checks) {
  std::string text;
  int warnings = 0, failures = 0;
  for (const CheckResult& check : checks) {
    std::string word = status_word(check.status);
    std::transform(word.begin(), word.end(), word.begin(), ::toupper);
    text += word + "  " + check.name + ": " + check.detail + "\n";
    if (check.status != CheckStatus::kPass && !check.hint.empty()) {
      text += "      HINT: " + check.hint + "\n";
    }
    warnings += check.status == CheckStatus::kWarn;
    failures += check.status == CheckStatus::kFail;
  }
  text += "doctor: " + std::to_string(checks.size()) + " checks, " + std::to_string(failures) +
          " failed, " + std::to_string(warnings) +
          " warned: " + (failures ? "this node cannot train as configured" : "ok") + "\n";
  return text;
}

std::string format_json_report(const std::vector<CheckResult>& checks) {
  nlohmann::json list = nlohmann::json::array();
  for (const CheckResult& check : checks) {
    list.push_back({{"name", check.name},
                    {"status", status_word(check.status)},
                    {"detail", check.detail},
                    {"hint", check.hint}});
  }
  // Replace, never throw, on bytes that are not UTF-8 (device names, paths).
  return nlohmann::json{{"ok", all_ok(checks)}, {"checks", list}}.dump(
      -1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace shardtrain::doctor
