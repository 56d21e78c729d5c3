#include "core/env_switch.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdlib>
#include <string>

#include "core/error.h"

namespace shardtrain {
namespace {

// The value as the message shows it: bounded, so a huge variable cannot flood the error line.
std::string shown(std::string_view value) {
  constexpr size_t kMaxShown = 64;
  if (value.size() <= kMaxShown) return std::string(value);
  return std::string(value.substr(0, kMaxShown)) + "...";
}

}  // namespace

bool parse_env_switch(const char* name, const char* value, bool default_on) {
  if (value == nullptr || *value == '\0') return default_on;
  const std::string_view text(value);
  if (text == "1") return true;
  if (text == "0") return false;
  throw Error(fmt::format("environment variable {}='{}': use 1 (on) or 0 (off); unset means {}",
                          name, shown(text), default_on ? "on" : "off"));
}

bool env_switch(const char* name, bool default_on) {
  return parse_env_switch(name, std::getenv(name), default_on);
}

int parse_env_choice(const char* name, const char* value,
                     std::initializer_list<std::string_view> choices) {
  if (value == nullptr || *value == '\0') return 0;
  int index = 0;
  for (std::string_view choice : choices) {
    if (choice == value) return index;
    ++index;
  }
  throw Error(fmt::format("environment variable {}='{}': use one of {} (unset means {})", name,
                          shown(value), fmt::join(choices, ", "), *choices.begin()));
}

int env_choice(const char* name, std::initializer_list<std::string_view> choices) {
  return parse_env_choice(name, std::getenv(name), choices);
}

}  // namespace shardtrain
