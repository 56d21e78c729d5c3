// finite_range: the check of a floating-point flag. CLI::Range compares with < and >, so nan
// passes it (and then reached the commands: an internal error in doctor's NCCL test, a nan
// timeout); this refuses anything that is not a finite number in [min, max], with CLI11's usual
// one-line usage error (exit 2).
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <string>

namespace shardtrain::cli {

inline CLI::Validator finite_range(double min, double max) {
  const std::string range =
      "[" + CLI::detail::to_string(min) + " - " + CLI::detail::to_string(max) + "]";
  return CLI::Validator(
      [min, max, range](std::string& text) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(text.c_str(), &end);
        if (text.empty() || end != text.c_str() + text.size() || !std::isfinite(value) ||
            value < min || value > max) {
          return "Value " + text + " is not a finite number in " + range;
        }
        return "";
      },
      "FLOAT in " + range);
}

}  // namespace shardtrain::cli
