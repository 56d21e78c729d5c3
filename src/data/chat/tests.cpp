#include "data/chat/tests.h"

#include <map>

#include "core/error.h"
#include "data/chat/operators.h"

namespace shardtrain::chat {
namespace {

const Value& argument(const std::string& name, const std::vector<Value>& args) {
  if (args.empty()) fail("the test '{}' needs an argument", name);
  return args[0];
}

bool has_cased(const std::string& text, bool want_lower) {
  bool cased = false;
  for (char32_t cp : to_code_points(text)) {
    const bool is_upper = cp < 128 ? (cp >= 'A' && cp <= 'Z') : false;
    const bool is_lower = cp < 128 ? (cp >= 'a' && cp <= 'z') : false;
    if ((want_lower && is_upper) || (!want_lower && is_lower)) return false;
    cased = cased || is_upper || is_lower;
  }
  return cased;
}

int64_t integer_for(const std::string& test, const Value& value) {
  if (!value.is_int() && !value.is_bool()) {
    require_defined(value);
    fail("the test '{}' needs an integer, got {}", test, value.type_name());
  }
  return value.as_int();
}

using Test = bool (*)(const std::string&, const Value&, const std::vector<Value>&);

const std::map<std::string, Test>& tests() {
  static const std::map<std::string, Test> table = {
      {"defined", [](auto&, const Value& v, auto&) { return !v.is_undefined(); }},
      {"undefined", [](auto&, const Value& v, auto&) { return v.is_undefined(); }},
      {"none", [](auto&, const Value& v, auto&) { return v.is_none(); }},
      {"boolean", [](auto&, const Value& v, auto&) { return v.is_bool(); }},
      {"true", [](auto&, const Value& v, auto&) { return v.is_bool() && v.as_bool(); }},
      {"false", [](auto&, const Value& v, auto&) { return v.is_bool() && !v.as_bool(); }},
      {"integer", [](auto&, const Value& v, auto&) { return v.is_int(); }},
      {"float", [](auto&, const Value& v, auto&) { return v.is_float(); }},
      {"number", [](auto&, const Value& v, auto&) { return v.is_number(); }},
      {"string", [](auto&, const Value& v, auto&) { return v.is_string(); }},
      {"mapping", [](auto&, const Value& v, auto&) { return v.is_dict(); }},
      {"iterable",
       [](auto&, const Value& v, auto&) { return v.is_iterable() || v.is_undefined(); }},
      {"sequence",
       [](auto&, const Value& v, auto&) { return v.is_iterable() || v.is_undefined(); }},
      {"callable", [](auto&, const Value& v, auto&) { return v.is_callable(); }},
      {"escaped", [](auto&, const Value&, auto&) { return false; }},
      {"even", [](auto& n, const Value& v, auto&) { return integer_for(n, v) % 2 == 0; }},
      {"odd", [](auto& n, const Value& v, auto&) { return integer_for(n, v) % 2 != 0; }},
      {"divisibleby",
       [](auto& n, const Value& v, auto& a) {
         const int64_t d = integer_for(n, argument(n, a));
         if (d == 0) fail("divisibleby(0): integer division or modulo by zero");
         return integer_for(n, v) % d == 0;
       }},
      {"equalto", [](auto& n, const Value& v, auto& a) { return values_equal(v, argument(n, a)); }},
      {"eq", [](auto& n, const Value& v, auto& a) { return values_equal(v, argument(n, a)); }},
      {"==", [](auto& n, const Value& v, auto& a) { return values_equal(v, argument(n, a)); }},
      {"ne", [](auto& n, const Value& v, auto& a) { return !values_equal(v, argument(n, a)); }},
      {"!=", [](auto& n, const Value& v, auto& a) { return !values_equal(v, argument(n, a)); }},
      {"lt",
       [](auto& n, const Value& v, auto& a) { return compare_operator("<", v, argument(n, a)); }},
      {"<",
       [](auto& n, const Value& v, auto& a) { return compare_operator("<", v, argument(n, a)); }},
      {"le",
       [](auto& n, const Value& v, auto& a) { return compare_operator("<=", v, argument(n, a)); }},
      {"<=",
       [](auto& n, const Value& v, auto& a) { return compare_operator("<=", v, argument(n, a)); }},
      {"gt",
       [](auto& n, const Value& v, auto& a) { return compare_operator(">", v, argument(n, a)); }},
      {">",
       [](auto& n, const Value& v, auto& a) { return compare_operator(">", v, argument(n, a)); }},
      {"ge",
       [](auto& n, const Value& v, auto& a) { return compare_operator(">=", v, argument(n, a)); }},
      {">=",
       [](auto& n, const Value& v, auto& a) { return compare_operator(">=", v, argument(n, a)); }},
      {"in", [](auto& n, const Value& v, auto& a) { return contains(argument(n, a), v); }},
      {"sameas",
       [](auto& n, const Value& v, auto& a) {
         const Value& other = argument(n, a);
         if (v.kind() != other.kind()) return false;
         if (v.is_none() || v.is_undefined()) return true;
         if (v.is_bool()) return v.as_bool() == other.as_bool();
         return values_equal(v, other) && (v.is_int() || v.is_string());
       }},
      {"lower", [](auto&, const Value& v,
                   auto&) { return v.is_string() && has_cased(v.as_string(), true); }},
      {"upper", [](auto&, const Value& v,
                   auto&) { return v.is_string() && has_cased(v.as_string(), false); }},
  };
  return table;
}

}  // namespace

bool test_exists(const std::string& name) { return tests().count(name) != 0; }

bool apply_test(const std::string& name, const Value& value, const std::vector<Value>& args) {
  const auto it = tests().find(name);
  if (it == tests().end()) fail("no test named '{}'", name);
  return it->second(name, value, args);
}

}  // namespace shardtrain::chat
