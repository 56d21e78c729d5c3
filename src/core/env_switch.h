// Environment variables that switch behaviour on or off, or pick one of a few named choices,
// read strictly: a value that is not one of the accepted spellings is an Error naming the
// variable and what it accepts (the CLI turns it into one line and exit 2). A misspelt switch
// must stop the run rather than silently measure or run the default.
//
// An unset or empty variable means the default. The `value` overloads parse a given value (a
// test's); the others read the process environment on every call, so a test may change a
// variable between calls.
#pragma once

#include <initializer_list>
#include <string_view>

namespace shardtrain {

// "1" on, "0" off; unset or empty: default_on.
bool parse_env_switch(const char* name, const char* value, bool default_on);
bool env_switch(const char* name, bool default_on);

// The index of value in choices; unset or empty: 0 (the first choice is the default).
int parse_env_choice(const char* name, const char* value,
                     std::initializer_list<std::string_view> choices);
int env_choice(const char* name, std::initializer_list<std::string_view> choices);

}  // namespace shardtrain
