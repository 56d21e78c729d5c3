// add_choice_option: a command-line option whose value is one of a choice's names
// (core/choice_names.h) and lands in `target` as its enum, parsed once, when the flag is read.
// CLI11 refuses any other value with the list of names (exit 2, as every usage error); the help
// shows the names and the default.
#pragma once

#include <CLI/CLI.hpp>
#include <string>

#include "core/choice_names.h"

namespace shardtrain::cli {

// REQUIRES: `target` and `names` outlive the parse (fields of the command's args, static tables).
template <typename Value>
CLI::Option* add_choice_option(CLI::App* cmd, const std::string& flag, Value& target,
                               const ChoiceNames<Value>& names, const std::string& help) {
  return cmd
      ->add_option_function<std::string>(
          flag,
          [&target, &names, flag](const std::string& value) {
            target = parse_choice(names, value, flag);
          },
          help)
      ->check(CLI::IsMember(choice_list(names)))
      ->default_str(choice_name(names, target));
}

}  // namespace shardtrain::cli
