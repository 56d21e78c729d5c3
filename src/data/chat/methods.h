// Attribute and item access in the sandbox, with Jinja2's rules: `x.name` looks for a method
// first, then the item "name"; `x[key]` looks for the item first, then a method. What is found
// is an item of a dict / list / string, a namespace attribute, or one of these bound methods;
// nothing else of the host is reachable (the sandbox):
//   str:  startswith endswith strip lstrip rstrip split rsplit splitlines replace upper lower
//         title capitalize swapcase find rfind index rindex count join format isdigit isalpha
//         isalnum isspace isupper islower center ljust rjust zfill partition
//   dict: items keys values get
//   list: index count
// Mutating methods (append, pop, update, ...) are refused as in Jinja2's
// ImmutableSandboxedEnvironment. A missing item or attribute is undefined (named, for errors);
// an attribute of an undefined value is the Error "'name' is undefined".
// Slicing follows Python (negative indices, steps, clamping); strings index by code point.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "data/chat/limits.h"
#include "data/chat/python_strings.h"
#include "data/chat/value.h"

namespace shardtrain::chat {

Value get_attribute(const Value& object, const std::string& name, const RenderLimits& limits);

Value get_item(const Value& object, const Value& key, const RenderLimits& limits);

std::string python_lower(const std::string& text);
std::string python_upper(const std::string& text);
// Python's str.title() and str.capitalize().
std::string python_title(const std::string& text);
std::string python_capitalize(const std::string& text);

}  // namespace shardtrain::chat
