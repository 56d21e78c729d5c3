// ChoiceNames: the names users type for the values of one choice (a config key's enum, a flag's
// value), in the order messages list them. Each list is written once, next to its enum, and
// read by the config schema (core/config.h add_enum), the command-line flags and the messages,
// so a choice is parsed once, where the input arrives, and travels as its enum after that.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace shardtrain {

template <typename Value>
using ChoiceNames = std::vector<std::pair<std::string, Value>>;

// The name of `value` in `names` ("?" when absent: a programming error, never user input).
template <typename Value>
std::string choice_name(const ChoiceNames<Value>& names, const Value& value) {
  for (const auto& [name, entry] : names)
    if (entry == value) return name;
  return "?";
}

// The names alone, in order (CLI11's IsMember, help texts).
template <typename Value>
std::vector<std::string> choice_list(const ChoiceNames<Value>& names) {
  std::vector<std::string> out;
  out.reserve(names.size());
  for (const auto& entry : names) out.push_back(entry.first);
  return out;
}

// The value named `name`; otherwise throws Error "`what` must be one of a, b, c; got \"x\"",
// where `what` names the key or flag ("data.overlong", "--overlong").
template <typename Value>
Value parse_choice(const ChoiceNames<Value>& names, const std::string& name,
                   const std::string& what) {
  std::string listed;
  for (const auto& [known, value] : names) {
    if (known == name) return value;
    listed += (listed.empty() ? "" : ", ") + known;
  }
  fail("{} must be one of {}; got \"{}\"", what, listed, name);
}

}  // namespace shardtrain
