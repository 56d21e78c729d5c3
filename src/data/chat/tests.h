// Jinja2's tests (`x is name(args)`), with Python's notion of types:
//   defined undefined none boolean true false integer float number string mapping iterable
//   sequence callable even odd divisibleby(n) equalto/eq/==(v) ne/!= lt/< le/<= gt/> ge/>=
//   in(seq) sameas(v) lower upper escaped
// `number` is true for bools (Python's numbers.Number), `integer` is not; `sequence` and
// `iterable` hold for strings, lists and dicts. An unknown name is an Error
// "no test named 'x'" (Jinja2 fails such a template too).
#pragma once

#include <string>
#include <vector>

#include "data/chat/value.h"

namespace shardtrain::chat {

bool apply_test(const std::string& name, const Value& value, const std::vector<Value>& args);

bool test_exists(const std::string& name);

}  // namespace shardtrain::chat
