// Value: what a chat-template expression evaluates to, with Python's semantics as Jinja2 (and so
// transformers' apply_chat_template) has them.
//
// Kinds: undefined (jinja2's default Undefined: prints "", iterates empty, is falsy, fails on
// attribute access or arithmetic), none, bool, int (64-bit; overflow is an error, not a wrap),
// float, string (UTF-8; lengths and indices count code points like Python str), list (also
// tuples: same value, printed with parentheses), dict (insertion-ordered, string keys, like the
// JSON objects the messages come from), namespace (the one mutable kind: `{% set ns.x = 1 %}`)
// and callable (macros, bound methods and globals such as range or raise_exception).
// Strings, lists and dicts are shared and immutable once built, so copying a Value is cheap (a
// list of 1,000 copies of a 16 MiB string holds one string, not 16 GB).
//
// Conversions: from_json() maps JSON to values (integers stay int, other numbers float);
// python_str() is str(x) (what `{{ x }}` prints), python_repr() is repr(x). Equality and ordering
// follow Python (1 == 1.0 == True; ordering of numbers, strings and lists only; others throw).
//
// Nesting is bounded: a list or dict nested deeper than kMaxValueDepth (from JSON or built by a
// template in a loop) is an Error, so printing, comparing or freeing a value never recurses
// without bound. A namespace counts as kNamespaceDepth levels and may not hold a value that
// contains a namespace, so a namespace can never contain itself.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace shardtrain::chat {

class Value;

inline constexpr int kMaxValueDepth = 200;
inline constexpr int kNamespaceDepth = kMaxValueDepth / 2;

struct ValueList {
  std::vector<Value> items;
  bool is_tuple = false;
};

struct ValueDict {
  std::vector<std::pair<std::string, Value>> entries;  // insertion order, unique keys
  const Value* find(const std::string& key) const;
  Value* find(const std::string& key);
  void set(const std::string& key, Value value);  // replaces in place or appends
};

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  const Value* keyword_arg(const std::string& name) const;
};

using NativeFunction = std::function<Value(const CallArgs&)>;

struct Callable {
  std::string name;
  NativeFunction call;
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kCallable
  };

  Value() = default;  // undefined
  static Value undefined(std::string name = "");
  static Value none();
  static Value boolean(bool value);
  static Value integer(int64_t value);
  static Value floating(double value);
  static Value string(std::string value);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(ValueDict dict);
  static Value make_namespace(ValueDict attributes);
  static Value callable(std::string name, NativeFunction function);
  // Throws Error when `json` nests deeper than kMaxValueDepth (checked before recursing).
  static Value from_json(const nlohmann::ordered_json& json, int depth = 0);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_bool() const { return kind_ == Kind::kBool; }
  bool is_int() const { return kind_ == Kind::kInt; }  // bool is not int here
  bool is_float() const { return kind_ == Kind::kFloat; }
  bool is_number() const { return is_bool() || is_int() || is_float(); }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_list() const { return kind_ == Kind::kList; }
  bool is_dict() const { return kind_ == Kind::kDict; }
  bool is_namespace() const { return kind_ == Kind::kNamespace; }
  bool is_callable() const { return kind_ == Kind::kCallable; }
  // Strings, lists and dicts: what `for` can walk and `length` can count.
  bool is_iterable() const { return is_string() || is_list() || is_dict(); }

  bool as_bool() const { return bool_; }
  int64_t as_int() const { return int_; }  // REQUIRES: is_int() or is_bool()
  double as_double() const;                // REQUIRES: is_number()
  const std::string& as_string() const { return *string_; }
  const ValueList& as_list() const { return *list_; }
  const ValueDict& as_dict() const { return *dict_; }  // dicts and namespaces
  ValueDict& namespace_attributes() const { return *dict_; }
  const Callable& as_callable() const { return *callable_; }
  const std::string& undefined_name() const { return *string_; }

  // 0 for scalars, 1 + the deepest item for lists and dicts, kNamespaceDepth for namespaces.
  int depth() const { return depth_; }

  bool truthy() const;
  std::string python_str() const;
  std::string python_repr() const;
  const char* type_name() const;  // Python's type name: "str", "list", "dict", "NoneType", ...

 private:
  Kind kind_ = Kind::kUndefined;
  int depth_ = 0;
  bool bool_ = false;
  int64_t int_ = 0;
  double double_ = 0.0;
  // The string value, or the name of an undefined variable.
  std::shared_ptr<const std::string> string_ = empty_string();
  static const std::shared_ptr<const std::string>& empty_string();
  std::shared_ptr<const ValueList> list_;
  std::shared_ptr<ValueDict> dict_;
  std::shared_ptr<const Callable> callable_;
};

// Python ==.
bool values_equal(const Value& a, const Value& b);
// Python <: -1, 0, 1. Throws Error for kinds Python cannot order ("'<' not supported between ...").
int compare_values(const Value& a, const Value& b);

// Python's repr(float): the shortest string that reads back to the same double ("1.0", "0.1",
// "1e+16", "inf", "nan").
std::string python_float_repr(double value);

// Decimal digits (an index written in a template: "a.12", "{3}") as an int; Error naming
// `what` when they do not fit in 64 bits.
int64_t decimal_index(const std::string& digits, const char* what);

// Python's str.isspace() for one code point.
bool is_python_space(char32_t code_point);

// UTF-8 text as code points and back (invalid bytes become U+FFFD).
std::u32string to_code_points(const std::string& text);
std::string from_code_points(const std::u32string& text);

}  // namespace shardtrain::chat
