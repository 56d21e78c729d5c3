#include "core/json_depth.h"

#include <fmt/format.h>

#include "core/error.h"

namespace shardtrain {

std::optional<std::string> json_nesting_problem(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;  // the escaped character, whatever it is, cannot end the string
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) {
        return fmt::format("JSON nested deeper than {} levels (at byte {})", max_depth, i + 1);
      }
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return std::nullopt;
}

void check_json_nesting(std::string_view text, const std::string& where, int max_depth) {
  if (const auto problem = json_nesting_problem(text, max_depth)) {
    fail("{}: {}; flatten the nested arrays/objects", where, *problem);
  }
}

}  // namespace shardtrain
