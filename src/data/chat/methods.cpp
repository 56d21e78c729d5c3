#include "data/chat/methods.h"

#include <utf8proc.h>

#include <algorithm>
#include <map>

#include "core/error.h"
#include "data/chat/operators.h"

namespace shardtrain::chat {
namespace {

bool is_cased(char32_t cp) {
  const auto category = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return category == UTF8PROC_CATEGORY_LU || category == UTF8PROC_CATEGORY_LL ||
         category == UTF8PROC_CATEGORY_LT;
}

char32_t lower_cp(char32_t cp) {
  return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(cp)));
}
char32_t upper_cp(char32_t cp) {
  return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(cp)));
}
char32_t title_cp(char32_t cp) {
  return static_cast<char32_t>(utf8proc_totitle(static_cast<utf8proc_int32_t>(cp)));
}

const std::string& string_arg(const CallArgs& args, size_t index, const char* method) {
  if (args.positional.size() <= index || !args.positional[index].is_string()) {
    fail("str.{}() needs a string argument", method);
  }
  return args.positional[index].as_string();
}

Value arg_or_undefined(const CallArgs& args, size_t index, const char* keyword = nullptr) {
  if (index < args.positional.size()) return args.positional[index];
  if (keyword) {
    if (const Value* value = args.keyword_arg(keyword)) return *value;
  }
  return Value::undefined();
}

int64_t int_arg(const CallArgs& args, size_t index, const char* keyword, int64_t fallback) {
  const Value value = arg_or_undefined(args, index, keyword);
  if (value.is_undefined() || value.is_none()) return fallback;
  if (!value.is_int() && !value.is_bool())
    fail("expected an integer argument, got {}", value.type_name());
  return value.as_int();
}

// Python code-point index of a byte offset in text.
int64_t code_point_index(const std::string& text, size_t byte_offset) {
  int64_t count = 0;
  for (size_t i = 0; i < byte_offset && i < text.size(); ++i) {
    if ((static_cast<unsigned char>(text[i]) & 0xC0) != 0x80) ++count;
  }
  return count;
}

bool affix_match(const std::string& text, const Value& affix, bool prefix) {
  auto one = [&](const Value& v) {
    if (!v.is_string()) fail("startswith/endswith first arg must be str or a tuple of str");
    const std::string& a = v.as_string();
    if (a.size() > text.size()) return false;
    return prefix ? text.compare(0, a.size(), a) == 0
                  : text.compare(text.size() - a.size(), a.size(), a) == 0;
  };
  if (affix.is_list()) {
    return std::any_of(affix.as_list().items.begin(), affix.as_list().items.end(), one);
  }
  return one(affix);
}

std::string pad(const std::string& text, int64_t width, const std::string& fill, char where,
                const RenderLimits& limits) {
  const int64_t length = code_point_index(text, text.size());
  if (width <= length) return text;
  check_string_size(static_cast<size_t>(width) * fill.size(), limits);
  const int64_t total = width - length;
  int64_t left = where == 'l' ? 0 : (where == 'r' ? total : total / 2 + (total & width & 1));
  std::string out;
  for (int64_t i = 0; i < left; ++i) out += fill;
  out += text;
  for (int64_t i = 0; i < total - left; ++i) out += fill;
  return out;
}

// str.format with "{}", "{0}", "{name}" and "{{" / "}}" (no format specs).
std::string python_format(const std::string& text, const CallArgs& args,
                          const RenderLimits& limits) {
  std::string out;
  size_t next_auto = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '{' && i + 1 < text.size() && text[i + 1] == '{') {
      out += '{';
      ++i;
    } else if (c == '}' && i + 1 < text.size() && text[i + 1] == '}') {
      out += '}';
      ++i;
    } else if (c == '{') {
      const size_t close = text.find('}', i);
      if (close == std::string::npos) fail("str.format: single '{{' encountered in format string");
      const std::string field = text.substr(i + 1, close - i - 1);
      if (field.find_first_of(":!.[") != std::string::npos) {
        fail("str.format: field \"{{{}}}\" uses a format spec, which is not supported", field);
      }
      Value value;
      if (field.empty()) {
        value = arg_or_undefined(args, next_auto++);
      } else if (std::all_of(field.begin(), field.end(), ::isdigit)) {
        value = arg_or_undefined(args, static_cast<size_t>(decimal_index(field, "str.format")));
      } else if (const Value* keyword = args.keyword_arg(field)) {
        value = *keyword;
      }
      if (value.is_undefined()) fail("str.format: no argument for field \"{{{}}}\"", field);
      out += value.python_str();
      check_string_size(out.size(), limits);
      i = close;
    } else if (c == '}') {
      fail("str.format: single '}}' encountered in format string");
    } else {
      out += c;
    }
  }
  return out;
}

bool all_code_points(const std::string& text, bool (*predicate)(char32_t)) {
  const std::u32string points = to_code_points(text);
  return !points.empty() && std::all_of(points.begin(), points.end(), predicate);
}

using StringMethod = Value (*)(const std::string&, const CallArgs&, const RenderLimits&);
using StringMethodTable = std::map<std::string, StringMethod>;

std::vector<Value> strings_to_values(const std::vector<std::string>& parts) {
  std::vector<Value> out;
  out.reserve(parts.size());
  for (const auto& part : parts) out.push_back(Value::string(part));
  return out;
}

int64_t find_in(const std::string& s, const CallArgs& a, bool reverse, bool must) {
  const std::string& needle = string_arg(a, 0, reverse ? "rfind" : "find");
  const size_t at = reverse ? s.rfind(needle) : s.find(needle);
  if (at == std::string::npos) {
    if (must) fail("str.index(): substring not found");
    return -1;
  }
  return code_point_index(s, at);
}

// startswith/endswith and the strip family.
StringMethodTable affix_and_strip_methods() {
  return {
      {"startswith",
       [](auto& s, auto& a, auto&) {
         return Value::boolean(affix_match(s, arg_or_undefined(a, 0), true));
       }},
      {"endswith",
       [](auto& s, auto& a, auto&) {
         return Value::boolean(affix_match(s, arg_or_undefined(a, 0), false));
       }},
      {"strip",
       [](auto& s, auto& a, auto&) {
         return Value::string(python_strip(s, arg_or_undefined(a, 0), true, true));
       }},
      {"lstrip",
       [](auto& s, auto& a, auto&) {
         return Value::string(python_strip(s, arg_or_undefined(a, 0), true, false));
       }},
      {"rstrip",
       [](auto& s, auto& a, auto&) {
         return Value::string(python_strip(s, arg_or_undefined(a, 0), false, true));
       }},
  };
}

// Splitting, joining, replacing and formatting.
StringMethodTable split_and_join_methods() {
  return {
      {"split",
       [](auto& s, auto& a, auto&) {
         return Value::list(strings_to_values(
             python_split(s, arg_or_undefined(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1), false)));
       }},
      {"rsplit",
       [](auto& s, auto& a, auto&) {
         return Value::list(strings_to_values(
             python_split(s, arg_or_undefined(a, 0, "sep"), int_arg(a, 1, "maxsplit", -1), true)));
       }},
      {"splitlines",
       [](auto& s, auto&, auto&) { return Value::list(strings_to_values(python_splitlines(s))); }},
      {"partition",
       [](auto& s, auto& a, auto&) {
         const std::string& sep = string_arg(a, 0, "partition");
         const size_t at = s.find(sep);
         if (at == std::string::npos) {
           return Value::list({Value::string(s), Value::string(""), Value::string("")}, true);
         }
         return Value::list({Value::string(s.substr(0, at)), Value::string(sep),
                             Value::string(s.substr(at + sep.size()))},
                            true);
       }},
      {"join",
       [](auto& s, auto& a, auto& l) {
         const Value items = arg_or_undefined(a, 0);
         if (!items.is_list()) fail("str.join() needs a list of strings");
         std::string out;
         for (size_t i = 0; i < items.as_list().items.size(); ++i) {
           const Value& item = items.as_list().items[i];
           if (!item.is_string())
             fail("sequence item {}: expected str instance, {} found", i, item.type_name());
           if (i > 0) out += s;
           out += item.as_string();
           check_string_size(out.size(), l);
         }
         return Value::string(std::move(out));
       }},
      {"replace",
       [](auto& s, auto& a, auto& l) {
         return Value::string(python_replace(s, string_arg(a, 0, "replace"),
                                             string_arg(a, 1, "replace"),
                                             int_arg(a, 2, "count", -1), l));
       }},
      {"format", [](auto& s, auto& a, auto& l) { return Value::string(python_format(s, a, l)); }},
  };
}

// Case conversions.
StringMethodTable case_methods() {
  return {
      {"upper", [](auto& s, auto&, auto&) { return Value::string(python_upper(s)); }},
      {"lower", [](auto& s, auto&, auto&) { return Value::string(python_lower(s)); }},
      {"title", [](auto& s, auto&, auto&) { return Value::string(python_title(s)); }},
      {"capitalize", [](auto& s, auto&, auto&) { return Value::string(python_capitalize(s)); }},
      {"swapcase",
       [](auto& s, auto&, auto&) {
         std::u32string points = to_code_points(s);
         for (char32_t& cp : points) cp = lower_cp(cp) == cp ? upper_cp(cp) : lower_cp(cp);
         return Value::string(from_code_points(points));
       }},
  };
}

// Substring search and counting.
StringMethodTable search_methods() {
  return {
      {"find", [](auto& s, auto& a, auto&) { return Value::integer(find_in(s, a, false, false)); }},
      {"rfind", [](auto& s, auto& a, auto&) { return Value::integer(find_in(s, a, true, false)); }},
      {"index", [](auto& s, auto& a, auto&) { return Value::integer(find_in(s, a, false, true)); }},
      {"rindex", [](auto& s, auto& a, auto&) { return Value::integer(find_in(s, a, true, true)); }},
      {"count",
       [](auto& s, auto& a, auto&) {
         const std::string& needle = string_arg(a, 0, "count");
         if (needle.empty()) return Value::integer(code_point_index(s, s.size()) + 1);
         int64_t n = 0;
         for (size_t at = s.find(needle); at != std::string::npos;
              at = s.find(needle, at + needle.size()))
           ++n;
         return Value::integer(n);
       }},
  };
}

// Character-class tests (str.isdigit() and the like).
StringMethodTable class_test_methods() {
  return {
      {"isdigit",
       [](auto& s, auto&, auto&) {
         return Value::boolean(all_code_points(s, [](char32_t c) { return c >= '0' && c <= '9'; }));
       }},
      {"isalpha",
       [](auto& s, auto&, auto&) {
         return Value::boolean(all_code_points(s, [](char32_t c) {
           const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
           return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
         }));
       }},
      {"isalnum",
       [](auto& s, auto&, auto&) {
         return Value::boolean(all_code_points(s, [](char32_t c) {
           const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(c));
           return (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
                  k == UTF8PROC_CATEGORY_ND;
         }));
       }},
      {"isspace",
       [](auto& s, auto&, auto&) { return Value::boolean(all_code_points(s, is_python_space)); }},
      {"isupper",
       [](auto& s, auto&, auto&) {
         return Value::boolean(python_upper(s) == s && python_lower(s) != s);
       }},
      {"islower",
       [](auto& s, auto&, auto&) {
         return Value::boolean(python_lower(s) == s && python_upper(s) != s);
       }},
  };
}

// Padding to a width.
StringMethodTable padding_methods() {
  return {
      {"center",
       [](auto& s, auto& a, auto& l) {
         return Value::string(pad(s, int_arg(a, 0, "width", 0), " ", 'c', l));
       }},
      {"ljust",
       [](auto& s, auto& a, auto& l) {
         return Value::string(pad(s, int_arg(a, 0, "width", 0), " ", 'l', l));
       }},
      {"rjust",
       [](auto& s, auto& a, auto& l) {
         return Value::string(pad(s, int_arg(a, 0, "width", 0), " ", 'r', l));
       }},
      {"zfill",
       [](auto& s, auto& a, auto& l) {
         return Value::string(pad(s, int_arg(a, 0, "width", 0), "0", 'r', l));
       }},
  };
}

const StringMethodTable& string_methods() {
  static const StringMethodTable table = [] {
    StringMethodTable all = affix_and_strip_methods();
    all.merge(split_and_join_methods());
    all.merge(case_methods());
    all.merge(search_methods());
    all.merge(class_test_methods());
    all.merge(padding_methods());
    return all;
  }();
  return table;
}

Value dict_method(const Value& object, const std::string& name) {
  if (name == "items") {
    return Value::callable("items", [object](const CallArgs&) {
      std::vector<Value> pairs;
      for (const auto& [key, value] : object.as_dict().entries) {
        pairs.push_back(Value::list({Value::string(key), value}, true));
      }
      return Value::list(std::move(pairs));
    });
  }
  if (name == "keys") {
    return Value::callable("keys", [object](const CallArgs&) {
      std::vector<Value> keys;
      for (const auto& entry : object.as_dict().entries) keys.push_back(Value::string(entry.first));
      return Value::list(std::move(keys));
    });
  }
  if (name == "values") {
    return Value::callable("values", [object](const CallArgs&) {
      std::vector<Value> values;
      for (const auto& entry : object.as_dict().entries) values.push_back(entry.second);
      return Value::list(std::move(values));
    });
  }
  if (name == "get") {
    return Value::callable("get", [object](const CallArgs& args) {
      const Value key = arg_or_undefined(args, 0);
      const Value fallback = args.positional.size() > 1 ? args.positional[1] : Value::none();
      if (!key.is_string()) return fallback;
      const Value* found = object.as_dict().find(key.as_string());
      return found ? *found : fallback;
    });
  }
  return Value::undefined();
}

Value list_method(const Value& object, const std::string& name) {
  if (name == "index" || name == "count") {
    return Value::callable(name, [object, name](const CallArgs& args) {
      const Value needle = arg_or_undefined(args, 0);
      int64_t count = 0;
      const auto& items = object.as_list().items;
      for (size_t i = 0; i < items.size(); ++i) {
        if (!values_equal(items[i], needle)) continue;
        if (name == "index") return Value::integer(static_cast<int64_t>(i));
        ++count;
      }
      if (name == "index") fail("list.index(x): x not in list");
      return Value::integer(count);
    });
  }
  return Value::undefined();
}

bool is_mutating_method(const Value& object, const std::string& name) {
  static const char* const kList[] = {"append", "extend",     "insert", "pop",
                                      "remove", "clear",      "sort",   "reverse",
                                      "update", "setdefault", "popitem"};
  if (!object.is_list() && !object.is_dict()) return false;
  return std::find_if(std::begin(kList), std::end(kList),
                      [&](const char* m) { return name == m; }) != std::end(kList);
}

Value method_of(const Value& object, const std::string& name, const RenderLimits& limits) {
  if (is_mutating_method(object, name)) {
    return Value::callable(
        name, [name, type = std::string(object.type_name())](const CallArgs&) -> Value {
          fail(
              "{}.{}() is not allowed: the template sandbox is immutable (as in transformers); "
              "build a new value with + or a namespace instead",
              type, name);
        });
  }
  if (object.is_string()) {
    const auto it = string_methods().find(name);
    if (it == string_methods().end()) return Value::undefined();
    return Value::callable(name, [text = object.as_string(), method = it->second, limits](
                                     const CallArgs& args) { return method(text, args, limits); });
  }
  if (object.is_dict()) return dict_method(object, name);
  if (object.is_list()) return list_method(object, name);
  return Value::undefined();
}

Value item_of(const Value& object, const Value& key) {
  if (object.is_dict() || object.is_namespace()) {
    if (!key.is_string()) return Value::undefined();
    const Value* found = object.as_dict().find(key.as_string());
    return found ? *found : Value::undefined(key.as_string());
  }
  if ((object.is_list() || object.is_string()) && (key.is_int() || key.is_bool())) {
    if (object.is_list()) {
      const auto& items = object.as_list().items;
      int64_t i = key.as_int();
      if (i < 0) i += static_cast<int64_t>(items.size());
      if (i < 0 || i >= static_cast<int64_t>(items.size())) return Value::undefined();
      return items[static_cast<size_t>(i)];
    }
    const std::u32string points = to_code_points(object.as_string());
    int64_t i = key.as_int();
    if (i < 0) i += static_cast<int64_t>(points.size());
    if (i < 0 || i >= static_cast<int64_t>(points.size())) return Value::undefined();
    return Value::string(from_code_points(points.substr(static_cast<size_t>(i), 1)));
  }
  return Value::undefined();
}

}  // namespace

Value get_attribute(const Value& object, const std::string& name, const RenderLimits& limits) {
  require_defined(object);
  Value method = method_of(object, name, limits);
  if (!method.is_undefined()) return method;
  Value item = item_of(object, Value::string(name));
  if (item.is_undefined()) return Value::undefined(name);
  return item;
}

Value get_item(const Value& object, const Value& key, const RenderLimits& limits) {
  require_defined(object);
  Value item = item_of(object, key);
  if (!item.is_undefined()) return item;
  if (key.is_string()) {
    Value method = method_of(object, key.as_string(), limits);
    if (!method.is_undefined()) return method;
    return Value::undefined(key.as_string());
  }
  return Value::undefined(key.python_str());
}

std::string python_lower(const std::string& text) {
  std::u32string points = to_code_points(text);
  for (char32_t& cp : points) cp = lower_cp(cp);
  return from_code_points(points);
}

std::string python_upper(const std::string& text) {
  std::u32string points = to_code_points(text);
  for (char32_t& cp : points) cp = upper_cp(cp);
  return from_code_points(points);
}

std::string python_title(const std::string& text) {
  std::u32string points = to_code_points(text);
  bool previous_cased = false;
  for (char32_t& cp : points) {
    cp = previous_cased ? lower_cp(cp) : title_cp(cp);
    previous_cased = is_cased(cp);
  }
  return from_code_points(points);
}

std::string python_capitalize(const std::string& text) {
  std::u32string points = to_code_points(text);
  for (size_t i = 0; i < points.size(); ++i) {
    points[i] = i == 0 ? title_cp(points[i]) : lower_cp(points[i]);
  }
  return from_code_points(points);
}

}  // namespace shardtrain::chat
