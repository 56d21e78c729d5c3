#include "data/chat/value.h"

#include <algorithm>
#include <charconv>
#include <cmath>

#include "core/error.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::chat {

const Value* ValueDict::find(const std::string& key) const {
  for (const auto& entry : entries) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

Value* ValueDict::find(const std::string& key) {
  for (auto& entry : entries) {
    if (entry.first == key) return &entry.second;
  }
  return nullptr;
}

void ValueDict::set(const std::string& key, Value value) {
  if (Value* existing = find(key)) {
    *existing = std::move(value);
  } else {
    entries.emplace_back(key, std::move(value));
  }
}

const Value* CallArgs::keyword_arg(const std::string& name) const {
  for (const auto& entry : keyword) {
    if (entry.first == name) return &entry.second;
  }
  return nullptr;
}

int64_t decimal_index(const std::string& digits, const char* what) {
  int64_t value = 0;
  const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (error != std::errc() || end != digits.data() + digits.size() || value < 0) {
    fail("{}: index {} is out of range", what,
         digits.size() > 40 ? digits.substr(0, 40) + "..." : digits);
  }
  return value;
}

const std::shared_ptr<const std::string>& Value::empty_string() {
  static const auto* empty =
      new std::shared_ptr<const std::string>(std::make_shared<const std::string>());
  return *empty;
}

Value Value::undefined(std::string name) {
  Value v;
  v.string_ = std::make_shared<const std::string>(std::move(name));
  return v;
}

Value Value::none() {
  Value v;
  v.kind_ = Kind::kNone;
  return v;
}

Value Value::boolean(bool value) {
  Value v;
  v.kind_ = Kind::kBool;
  v.bool_ = value;
  v.int_ = value ? 1 : 0;
  return v;
}

Value Value::integer(int64_t value) {
  Value v;
  v.kind_ = Kind::kInt;
  v.int_ = value;
  return v;
}

Value Value::floating(double value) {
  Value v;
  v.kind_ = Kind::kFloat;
  v.double_ = value;
  return v;
}

Value Value::string(std::string value) {
  Value v;
  v.kind_ = Kind::kString;
  v.string_ = std::make_shared<const std::string>(std::move(value));
  return v;
}

namespace {
// 1 + the deepest of `items`; Error past kMaxValueDepth, before the value exists.
template <typename Items, typename GetValue>
int nested_depth(const Items& items, GetValue get_value) {
  int deepest = 0;
  for (const auto& item : items) deepest = std::max(deepest, get_value(item).depth());
  if (deepest + 1 > kMaxValueDepth) {
    fail("a list or dict nested deeper than {} levels (flatten the data or the template)",
         kMaxValueDepth);
  }
  return deepest + 1;
}
}  // namespace

Value Value::list(std::vector<Value> items, bool is_tuple) {
  Value v;
  v.depth_ = nested_depth(items, [](const Value& item) -> const Value& { return item; });
  v.kind_ = Kind::kList;
  v.list_ = std::make_shared<const ValueList>(ValueList{std::move(items), is_tuple});
  return v;
}

Value Value::dict(ValueDict dict) {
  Value v;
  v.depth_ =
      nested_depth(dict.entries, [](const auto& entry) -> const Value& { return entry.second; });
  v.kind_ = Kind::kDict;
  v.dict_ = std::make_shared<ValueDict>(std::move(dict));
  return v;
}

Value Value::make_namespace(ValueDict attributes) {
  for (const auto& entry : attributes.entries) {
    if (entry.second.depth() >= kNamespaceDepth) {
      fail("namespace attribute \"{}\" holds a namespace or a value nested deeper than {} levels",
           entry.first, kNamespaceDepth - 1);
    }
  }
  Value v = dict(std::move(attributes));
  v.kind_ = Kind::kNamespace;
  v.depth_ = kNamespaceDepth;
  return v;
}

Value Value::callable(std::string name, NativeFunction function) {
  Value v;
  v.kind_ = Kind::kCallable;
  v.callable_ = std::make_shared<const Callable>(Callable{std::move(name), std::move(function)});
  return v;
}

Value Value::from_json(const nlohmann::ordered_json& json, int depth) {
  if (depth >= kMaxValueDepth && (json.is_array() || json.is_object())) {
    fail("JSON nested deeper than {} levels (a message or key holds arrays/objects that deep)",
         kMaxValueDepth);
  }
  switch (json.type()) {
    case nlohmann::ordered_json::value_t::null:
      return none();
    case nlohmann::ordered_json::value_t::boolean:
      return boolean(json.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return integer(json.get<int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const uint64_t value = json.get<uint64_t>();
      if (value > static_cast<uint64_t>(INT64_MAX)) return floating(static_cast<double>(value));
      return integer(static_cast<int64_t>(value));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return floating(json.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return string(json.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item, depth + 1));
      return list(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      ValueDict dict_value;
      for (const auto& [key, item] : json.items()) dict_value.set(key, from_json(item, depth + 1));
      return dict(std::move(dict_value));
    }
    default:
      return none();
  }
}

double Value::as_double() const {
  if (kind_ == Kind::kFloat) return double_;
  return static_cast<double>(int_);
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return bool_;
    case Kind::kInt:
      return int_ != 0;
    case Kind::kFloat:
      return double_ != 0.0;
    case Kind::kString:
      return !string_->empty();
    case Kind::kList:
      return !list_->items.empty();
    case Kind::kDict:
      return !dict_->entries.empty();
    case Kind::kNamespace:
    case Kind::kCallable:
      return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return list_->is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kCallable:
      return "function";
  }
  return "?";
}

std::string python_float_repr(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  if (value == 0.0) return std::signbit(value) ? "-0.0" : "0.0";
  // Shortest round-trip digits in scientific form, then Python's layout: positional when
  // -4 <= exponent < 16, else d.ddde+XX.
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof(buffer), value, std::chars_format::scientific);
  std::string sci(buffer, result.ptr);
  const size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  std::string out = negative ? "-" : "";
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  out += fmt::format("e{}{:02d}", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out;
}

namespace {

std::string repr_string(const std::string& text) {
  const bool has_single = text.find('\'') != std::string::npos;
  const bool has_double = text.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t cp : to_code_points(text)) {
    if (cp == static_cast<char32_t>(quote) || cp == U'\\') {
      out += '\\';
      out += static_cast<char>(cp);
    } else if (cp == U'\n') {
      out += "\\n";
    } else if (cp == U'\r') {
      out += "\\r";
    } else if (cp == U'\t') {
      out += "\\t";
    } else if (cp < 0x20 || cp == 0x7f) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(cp));
    } else {
      tokenizer::append_utf8(out, cp);
    }
  }
  out += quote;
  return out;
}

}  // namespace

std::string Value::python_repr() const {
  switch (kind_) {
    case Kind::kString:
      return repr_string(*string_);
    case Kind::kList: {
      const bool tuple = list_->is_tuple;
      std::string out = tuple ? "(" : "[";
      for (size_t i = 0; i < list_->items.size(); ++i) {
        if (i > 0) out += ", ";
        out += list_->items[i].python_repr();
      }
      if (tuple && list_->items.size() == 1) out += ",";
      out += tuple ? ")" : "]";
      return out;
    }
    case Kind::kDict: {
      std::string out = "{";
      for (size_t i = 0; i < dict_->entries.size(); ++i) {
        if (i > 0) out += ", ";
        out += repr_string(dict_->entries[i].first) + ": " + dict_->entries[i].second.python_repr();
      }
      return out + "}";
    }
    default:
      return python_str();
  }
}

std::string Value::python_str() const {
  switch (kind_) {
    case Kind::kUndefined:
      return "";
    case Kind::kNone:
      return "None";
    case Kind::kBool:
      return bool_ ? "True" : "False";
    case Kind::kInt:
      return std::to_string(int_);
    case Kind::kFloat:
      return python_float_repr(double_);
    case Kind::kString:
      return *string_;
    case Kind::kList:
    case Kind::kDict:
      return python_repr();
    case Kind::kNamespace:
      return "<Namespace>";
    case Kind::kCallable:
      return "<function " + callable_->name + ">";
  }
  return "";
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const auto& x = a.as_list().items;
      const auto& y = b.as_list().items;
      if (x.size() != y.size()) return false;
      for (size_t i = 0; i < x.size(); ++i) {
        if (!values_equal(x[i], y[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const auto& x = a.as_dict().entries;
      const auto& y = b.as_dict();
      if (x.size() != y.entries.size()) return false;
      for (const auto& [key, value] : x) {
        const Value* other = y.find(key);
        if (!other || !values_equal(value, *other)) return false;
      }
      return true;
    }
    default:
      return &a.as_dict() == &b.as_dict();
  }
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is_float() || b.is_float()) {
      const double x = a.as_double();
      const double y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    // UTF-8 byte order is code point order, which is Python's str order.
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!values_equal(x[i], y[i])) return compare_values(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail("'<' not supported between instances of '{}' and '{}'", a.type_name(), b.type_name());
}

bool is_python_space(char32_t cp) {
  return (cp >= 0x09 && cp <= 0x0d) || (cp >= 0x1c && cp <= 0x20) || cp == 0x85 || cp == 0xa0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202f || cp == 0x205f || cp == 0x3000;
}

std::u32string to_code_points(const std::string& text) {
  std::u32string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const tokenizer::Utf8Unit unit = tokenizer::decode_utf8(text, pos);
    out += unit.code_point == tokenizer::kInvalidCodePoint ? U'\uFFFD' : unit.code_point;
    pos += unit.length;
  }
  return out;
}

std::string from_code_points(const std::u32string& text) {
  std::string out;
  out.reserve(text.size());
  for (char32_t cp : text) tokenizer::append_utf8(out, cp);
  return out;
}

}  // namespace shardtrain::chat
