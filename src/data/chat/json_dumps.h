// Python's json.dumps for template values, as transformers' `tojson` filter calls it:
// json.dumps(x, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys).
//   - separators default to (", ", ": "), or (",", ": ") when indent is given;
//   - indent: a number of spaces or a string; lists and dicts break one item per line, empty
//     ones stay "[]" / "{}";
//   - strings escape only '"', '\\', \n \r \t \b \f and other control characters (\u00XX);
//     with ensure_ascii, non-ASCII too (\uXXXX, surrogate pairs above U+FFFF);
//   - floats as Python's repr (NaN, Infinity, -Infinity as Python writes them).
// Throws Error "Object of type T is not JSON serializable" for undefined, callables and
// namespaces; output longer than limits.max_output_bytes is an Error.
#pragma once

#include <optional>
#include <string>

#include "data/chat/limits.h"
#include "data/chat/value.h"

namespace shardtrain::chat {

struct JsonDumpsOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // the indentation unit; nullopt = one line
  std::string item_separator = ", ";
  std::string key_separator = ": ";
  bool sort_keys = false;
};

std::string json_dumps(const Value& value, const JsonDumpsOptions& options,
                       const RenderLimits& limits);

}  // namespace shardtrain::chat
