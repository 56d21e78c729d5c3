// Errors: the two kinds of failure shardtrain distinguishes.
//
// `Error` is for mistakes a user can make (a config key, a path, a data file, a checkpoint).
// Its message names the file or key and says what to do; `main` prints it on one line and
// exits with code 2. Invariant violations inside the program use SHARDTRAIN_CHECK, which
// prints file:line and aborts: those are bugs, not user errors.
#pragma once

#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace shardtrain {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Throws Error with a fmt-formatted message.
template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

[[noreturn]] void check_failed(const char* file, int line, const char* condition,
                               const std::string& detail);

}  // namespace shardtrain

// Aborts with file:line when an internal invariant does not hold.
#define SHARDTRAIN_CHECK(cond, ...)                                                      \
  do {                                                                                   \
    if (!(cond)) ::shardtrain::check_failed(__FILE__, __LINE__, #cond, fmt::format("" __VA_ARGS__)); \
  } while (0)
