// add_optional_string: a command-line option whose value lands in a std::optional<std::string>
// (unset = not given, so an environment variable or a default can fill it later; the launcher's
// PET_* fallbacks and `shardtrain k8s`'s required flags read it that way).
#pragma once

#include <CLI/CLI.hpp>
#include <optional>
#include <string>

namespace shardtrain::cli {

inline void add_optional_string(CLI::App* cmd, const char* name, std::optional<std::string>& target,
                                const char* help) {
  cmd->add_option_function<std::string>(
      name, [&target](const std::string& value) { target = value; }, help);
}

}  // namespace shardtrain::cli
