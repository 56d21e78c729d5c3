// Python's binary operators on template values, as Jinja2 evaluates them:
//   + (numbers, str + str, list + list)   - * / // % **   ~ (str(a) + str(b))
//   comparisons == != < > <= >=, `in` / `not in` (substring, list item, dict key)
// int op int stays int (overflow is an Error); / is always float; // and % floor like Python.
// str * int and list * int repeat (size checked against the limits before allocating).
// An undefined operand is an Error "'name' is undefined" (jinja2's Undefined), except for ~,
// ==, != and `in` on its right side, which treat it as "" / unequal / empty.
// Type mismatches are an Error worded like Python's TypeError.
#pragma once

#include <string>

#include "data/chat/limits.h"
#include "data/chat/value.h"

namespace shardtrain::chat {

Value binary_operator(const std::string& op, const Value& left, const Value& right,
                      const RenderLimits& limits);

bool compare_operator(const std::string& op, const Value& left, const Value& right);

// `needle in haystack`.
bool contains(const Value& haystack, const Value& needle);

// Throws Error "'name' is undefined" when value is undefined.
void require_defined(const Value& value);

}  // namespace shardtrain::chat
