// Python's str and sequence operations that chat templates reach through methods and filters
// (data/chat/methods.h): slicing by Python's rules (negative indices, steps, clamping; strings
// by code point), split/rsplit, strip, replace (its result size checked before it is built)
// and splitlines.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/chat/limits.h"
#include "data/chat/value.h"

namespace shardtrain::chat {

Value slice_value(const Value& object, const Value& start, const Value& stop, const Value& step);

// Python's str.split(sep, maxsplit) (sep undefined/none = runs of whitespace) and rsplit.
std::vector<std::string> python_split(const std::string& text, const Value& separator,
                                      int64_t max_split, bool from_right);

// Python's str.strip/lstrip/rstrip (chars undefined/none = whitespace).
std::string python_strip(const std::string& text, const Value& chars, bool left, bool right);

// Python's str.replace(old, new, count) with the result size checked before it is built.
std::string python_replace(const std::string& text, const std::string& old_text,
                           const std::string& new_text, int64_t count, const RenderLimits& limits);

// Python's str.splitlines() (no keepends): \n, \r\n, \r, \v, \f, \x1c-\x1e, \x85, U+2028/9.
std::vector<std::string> python_splitlines(const std::string& text);

}  // namespace shardtrain::chat
