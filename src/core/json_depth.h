// json_depth: how deeply a JSON text nests arrays and objects, measured on the text before it
// is parsed.
//
// nlohmann parses deep input without recursing, but copying, comparing, dumping and our own
// conversions of the parsed value recurse once per level: a line of 100,000 '[' would overflow
// the stack later, far from the input. Every reader of user JSON checks the text first and
// refuses it in one line. Linear in the text, no allocation.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace shardtrain {

// Deep enough for any real tokenizer.json, config.json or chat record (they nest < 20 levels).
inline constexpr int kMaxJsonDepth = 128;

// "JSON nested deeper than N levels (at byte B)" when `text` opens more than `max_depth`
// arrays/objects at once (brackets inside strings do not count); nullopt otherwise.
std::optional<std::string> json_nesting_problem(std::string_view text,
                                                int max_depth = kMaxJsonDepth);

// Throws Error "WHERE: JSON nested deeper than ...; flatten it" when json_nesting_problem finds
// one.
void check_json_nesting(std::string_view text, const std::string& where,
                        int max_depth = kMaxJsonDepth);

}  // namespace shardtrain
