#include "data/chat/filters.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <map>

#include "core/error.h"
#include "data/chat/json_dumps.h"
#include "data/chat/methods.h"
#include "data/chat/operators.h"
#include "data/chat/tests.h"

namespace shardtrain::chat {
namespace {

// Python-style binding of a filter's arguments (after the operand) to parameter names.
class Params {
 public:
  Params(const char* filter, const CallArgs& args, std::vector<const char*> names)
      : args_(args), names_(std::move(names)) {
    if (args.positional.size() > names_.size()) {
      fail("filter '{}' takes at most {} arguments, got {}", filter, names_.size(),
           args.positional.size());
    }
    for (const auto& keyword : args.keyword) {
      // Not a structured binding: clang 14 (the fuzz build) cannot capture one in a lambda.
      const std::string& key = keyword.first;
      if (std::find_if(names_.begin(), names_.end(), [&](const char* n) { return key == n; }) ==
          names_.end()) {
        fail("filter '{}' got an unexpected keyword argument '{}'", filter, key);
      }
    }
  }
  // The argument of parameter `index`, or undefined when not given.
  Value get(size_t index) const {
    if (index < args_.positional.size()) return args_.positional[index];
    if (const Value* value = args_.keyword_arg(names_[index])) return *value;
    return Value::undefined();
  }
  bool flag(size_t index, bool fallback) const {
    const Value v = get(index);
    return v.is_undefined() ? fallback : v.truthy();
  }

 private:
  const CallArgs& args_;
  std::vector<const char*> names_;
};

std::vector<Value> items_of(const Value& value, const char* filter) {
  if (value.is_undefined()) return {};
  if (value.is_list()) return value.as_list().items;
  if (value.is_string()) {
    std::vector<Value> chars;
    for (char32_t cp : to_code_points(value.as_string())) {
      chars.push_back(Value::string(from_code_points(std::u32string(1, cp))));
    }
    return chars;
  }
  if (value.is_dict()) {
    std::vector<Value> keys;
    for (const auto& entry : value.as_dict().entries) keys.push_back(Value::string(entry.first));
    return keys;
  }
  fail("filter '{}': '{}' object is not iterable", filter, value.type_name());
}

// Jinja2's make_attrgetter: "a.b.0" looks up a, then b, then item 0.
Value attribute_path(const Value& item, const Value& path, const RenderLimits& limits) {
  if (!path.is_string()) return get_item(item, path, limits);
  Value current = item;
  const std::string& text = path.as_string();
  size_t start = 0;
  while (true) {
    const size_t dot = text.find('.', start);
    const std::string part = text.substr(start, dot == std::string::npos ? dot : dot - start);
    const bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    current = get_item(
        current,
        digits ? Value::integer(decimal_index(part, "attribute path")) : Value::string(part),
        limits);
    if (dot == std::string::npos) return current;
    start = dot + 1;
  }
}

Value lowered(const Value& value, bool case_sensitive) {
  if (!case_sensitive && value.is_string()) return Value::string(python_lower(value.as_string()));
  return value;
}

std::string jinja_title(const std::string& text) {
  // Jinja2's title: split at runs of [-\s({\[<], then upper first char + lower rest per part.
  std::u32string points = to_code_points(text);
  std::u32string out;
  bool word_start = true;
  for (char32_t cp : points) {
    const bool separator =
        is_python_space(cp) || cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<';
    if (separator) {
      out += cp;
      word_start = true;
      continue;
    }
    out += word_start ? to_code_points(python_upper(from_code_points(std::u32string(1, cp))))
                      : to_code_points(python_lower(from_code_points(std::u32string(1, cp))));
    word_start = false;
  }
  return from_code_points(out);
}

Value filter_join(const Value& operand, const CallArgs& args, const RenderLimits& limits) {
  Params p("join", args, {"d", "attribute"});
  const Value separator = p.get(0);
  const Value attribute = p.get(1);
  const std::string sep = separator.is_undefined() ? "" : separator.python_str();
  std::string out;
  const std::vector<Value> items = items_of(operand, "join");
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out += sep;
    out += (attribute.is_undefined() ? items[i] : attribute_path(items[i], attribute, limits))
               .python_str();
    check_string_size(out.size(), limits);
  }
  return Value::string(std::move(out));
}

Value filter_default(const Value& operand, const CallArgs& args) {
  Params p("default", args, {"default_value", "boolean"});
  const Value fallback = p.get(0).is_undefined() ? Value::string("") : p.get(0);
  if (operand.is_undefined() || (p.flag(1, false) && !operand.truthy())) return fallback;
  return operand;
}

Value filter_tojson(const Value& operand, const CallArgs& args, const RenderLimits& limits) {
  Params p("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpsOptions options;
  options.ensure_ascii = p.flag(0, false);
  const Value indent = p.get(1);
  if (indent.is_int()) {
    options.indent =
        std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_int(), 0, 1000)), ' ');
  } else if (indent.is_string()) {
    options.indent = indent.as_string();
  } else if (!indent.is_undefined() && !indent.is_none()) {
    fail("tojson: indent must be an integer or a string");
  }
  if (options.indent) options.item_separator = ",";
  const Value separators = p.get(2);
  if (separators.is_list() && separators.as_list().items.size() == 2 &&
      separators.as_list().items[0].is_string() && separators.as_list().items[1].is_string()) {
    options.item_separator = separators.as_list().items[0].as_string();
    options.key_separator = separators.as_list().items[1].as_string();
  } else if (!separators.is_undefined() && !separators.is_none()) {
    fail("tojson: separators must be a pair of strings");
  }
  options.sort_keys = p.flag(3, false);
  return Value::string(json_dumps(operand, options, limits));
}

Value filter_indent(const Value& operand, const CallArgs& args, const RenderLimits& limits) {
  Params p("indent", args, {"width", "first", "blank"});
  const Value width = p.get(0);
  std::string unit = width.is_string() ? width.as_string() : std::string(4, ' ');
  if (width.is_int()) {
    // Checked before the indent string exists: indent(10**12) must not allocate first.
    const auto columns = static_cast<uint64_t>(std::max<int64_t>(0, width.as_int()));
    check_string_size(columns > limits.max_output_bytes ? SIZE_MAX : columns, limits);
    unit = std::string(static_cast<size_t>(columns), ' ');
  }
  const std::vector<std::string> lines = python_splitlines(operand.python_str() + "\n");
  const size_t line_cost = unit.size() + 1;
  check_string_size(lines.size() > limits.max_output_bytes / line_cost
                        ? SIZE_MAX
                        : operand.python_str().size() + lines.size() * line_cost,
                    limits);
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) {
      out += '\n';
      if (p.flag(2, false) || !lines[i].empty()) out += unit;
    }
    out += lines[i];
  }
  if (p.flag(1, false)) out = unit + out;
  return Value::string(std::move(out));
}

Value filter_round(const Value& operand, const CallArgs& args) {
  Params p("round", args, {"precision", "method"});
  const int64_t precision = p.get(0).is_undefined() ? 0 : p.get(0).as_int();
  const std::string method = p.get(1).is_undefined() ? "common" : p.get(1).python_str();
  if (!operand.is_number()) fail("round: expected a number, got {}", operand.type_name());
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double x = operand.as_double();
  if (method == "ceil") return Value::floating(std::ceil(x * scale) / scale);
  if (method == "floor") return Value::floating(std::floor(x * scale) / scale);
  if (method != "common") fail("round: method must be 'common', 'ceil' or 'floor'");
  if (!operand.is_float()) return operand;
  // Python's round(x, n): half to even.
  return Value::floating(std::nearbyint(x * scale) / scale);
}

Value filter_int(const Value& operand, const CallArgs& args) {
  Params p("int", args, {"default", "base"});
  const Value fallback = p.get(0).is_undefined() ? Value::integer(0) : p.get(0);
  if (operand.is_int() || operand.is_bool()) return Value::integer(operand.as_int());
  if (operand.is_float()) {
    const double x = std::trunc(operand.as_double());
    if (!std::isfinite(x) || std::fabs(x) > 9.2e18) return fallback;
    return Value::integer(static_cast<int64_t>(x));
  }
  if (operand.is_string()) {
    const std::string text = python_strip(operand.as_string(), Value(), true, true);
    const int base = p.get(1).is_undefined() ? 10 : static_cast<int>(p.get(1).as_int());
    char* end = nullptr;
    errno = 0;
    const long long value = std::strtoll(text.c_str(), &end, base);
    if (!text.empty() && end && *end == '\0' && errno == 0) return Value::integer(value);
    const double d = std::strtod(text.c_str(), &end);
    if (!text.empty() && end && *end == '\0' && std::isfinite(d)) {
      return Value::integer(static_cast<int64_t>(std::trunc(d)));
    }
  }
  return fallback;
}

Value filter_float(const Value& operand, const CallArgs& args) {
  Params p("float", args, {"default"});
  const Value fallback = p.get(0).is_undefined() ? Value::floating(0.0) : p.get(0);
  if (operand.is_number()) return Value::floating(operand.as_double());
  if (operand.is_string()) {
    const std::string text = python_strip(operand.as_string(), Value(), true, true);
    char* end = nullptr;
    const double d = std::strtod(text.c_str(), &end);
    if (!text.empty() && end && *end == '\0') return Value::floating(d);
  }
  return fallback;
}

// select / reject / selectattr / rejectattr.
Value filter_select(const Value& operand, const CallArgs& args, bool by_attribute, bool keep,
                    const RenderLimits& limits) {
  size_t next = 0;
  Value attribute;
  if (by_attribute) {
    if (args.positional.empty()) fail("selectattr/rejectattr need an attribute name");
    attribute = args.positional[next++];
  }
  std::string test;
  std::vector<Value> test_args;
  if (next < args.positional.size()) {
    test = args.positional[next++].python_str();
    test_args.assign(args.positional.begin() + static_cast<long>(next), args.positional.end());
  }
  std::vector<Value> out;
  for (const Value& item : items_of(operand, "select")) {
    const Value subject = by_attribute ? attribute_path(item, attribute, limits) : item;
    const bool passes = test.empty() ? subject.truthy() : apply_test(test, subject, test_args);
    if (passes == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Value filter_map(const Value& operand, const CallArgs& args, const RenderLimits& limits) {
  std::vector<Value> out;
  const Value* attribute = args.keyword_arg("attribute");
  if (attribute) {
    const Value* fallback = args.keyword_arg("default");
    for (const Value& item : items_of(operand, "map")) {
      Value v = attribute_path(item, *attribute, limits);
      out.push_back(v.is_undefined() && fallback ? *fallback : v);
    }
    return Value::list(std::move(out));
  }
  if (args.positional.empty()) fail("map needs a filter name or attribute=");
  const std::string filter = args.positional[0].python_str();
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items_of(operand, "map")) {
    out.push_back(apply_filter(filter, item, rest, limits));
  }
  return Value::list(std::move(out));
}

Value filter_sort(const Value& operand, const CallArgs& args, const RenderLimits& limits) {
  Params p("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = p.flag(0, false);
  const bool case_sensitive = p.flag(1, false);
  const Value attribute = p.get(2);
  std::vector<Value> items = items_of(operand, "sort");
  auto key = [&](const Value& v) {
    return lowered(attribute.is_undefined() ? v : attribute_path(v, attribute, limits),
                   case_sensitive);
  };
  std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
    return reverse ? compare_values(key(b), key(a)) < 0 : compare_values(key(a), key(b)) < 0;
  });
  return Value::list(std::move(items));
}

Value filter_unique(const Value& operand, const CallArgs& args, const RenderLimits& limits) {
  Params p("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = p.flag(0, false);
  const Value attribute = p.get(1);
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const Value& item : items_of(operand, "unique")) {
    const Value key = lowered(
        attribute.is_undefined() ? item : attribute_path(item, attribute, limits), case_sensitive);
    if (std::none_of(seen.begin(), seen.end(),
                     [&](const Value& s) { return values_equal(s, key); })) {
      seen.push_back(key);
      out.push_back(item);
    }
  }
  return Value::list(std::move(out));
}

Value filter_min_max(const Value& operand, const CallArgs& args, bool want_max,
                     const RenderLimits& limits) {
  Params p(want_max ? "max" : "min", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = p.flag(0, false);
  const Value attribute = p.get(1);
  const std::vector<Value> items = items_of(operand, want_max ? "max" : "min");
  if (items.empty()) return Value::undefined();
  auto key = [&](const Value& v) {
    return lowered(attribute.is_undefined() ? v : attribute_path(v, attribute, limits),
                   case_sensitive);
  };
  size_t best = 0;
  for (size_t i = 1; i < items.size(); ++i) {
    const int c = compare_values(key(items[i]), key(items[best]));
    if (want_max ? c > 0 : c < 0) best = i;
  }
  return items[best];
}

Value filter_sum(const Value& operand, const CallArgs& args, const RenderLimits& limits) {
  Params p("sum", args, {"attribute", "start"});
  Value total = p.get(1).is_undefined() ? Value::integer(0) : p.get(1);
  for (const Value& item : items_of(operand, "sum")) {
    const Value v = p.get(0).is_undefined() ? item : attribute_path(item, p.get(0), limits);
    total = binary_operator("+", total, v, limits);
  }
  return total;
}

Value filter_dictsort(const Value& operand, const CallArgs& args) {
  Params p("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (!operand.is_dict()) fail("dictsort: expected a dict, got {}", operand.type_name());
  const bool by_value = p.get(1).is_string() && p.get(1).as_string() == "value";
  const bool case_sensitive = p.flag(0, false);
  std::vector<Value> pairs;
  for (const auto& [key, value] : operand.as_dict().entries) {
    pairs.push_back(Value::list({Value::string(key), value}, true));
  }
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& a, const Value& b) {
    const Value& x = a.as_list().items[by_value ? 1 : 0];
    const Value& y = b.as_list().items[by_value ? 1 : 0];
    return compare_values(lowered(x, case_sensitive), lowered(y, case_sensitive)) < 0;
  });
  if (p.flag(2, false)) std::reverse(pairs.begin(), pairs.end());
  return Value::list(std::move(pairs));
}

std::string html_escape(const std::string& text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&#34;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

int64_t word_count(const std::string& text) {
  int64_t words = 0;
  bool in_word = false;
  for (char32_t cp : to_code_points(text)) {
    const auto k = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
    const bool word_char = cp == '_' || (k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO) ||
                           (k >= UTF8PROC_CATEGORY_ND && k <= UTF8PROC_CATEGORY_NO);
    if (word_char && !in_word) ++words;
    in_word = word_char;
  }
  return words;
}

int64_t length_of(const Value& operand) {
  if (operand.is_undefined()) return 0;
  if (operand.is_string()) return static_cast<int64_t>(to_code_points(operand.as_string()).size());
  if (operand.is_list()) return static_cast<int64_t>(operand.as_list().items.size());
  if (operand.is_dict()) return static_cast<int64_t>(operand.as_dict().entries.size());
  fail("object of type '{}' has no len()", operand.type_name());
}

using Filter = Value (*)(const Value&, const CallArgs&, const RenderLimits&);
using FilterTable = std::map<std::string, Filter>;

// Filters on strings (operands are converted with str() first).
FilterTable string_filters() {
  return {
      {"capitalize", [](const Value& v, auto&,
                        auto&) { return Value::string(python_capitalize(v.python_str())); }},
      {"center",
       [](const Value& v, const CallArgs& a, auto& l) {
         CallArgs c;
         c.positional.push_back(a.positional.empty() ? Value::integer(80) : a.positional[0]);
         return get_attribute(Value::string(v.python_str()), "center", l).as_callable().call(c);
       }},
      {"escape",
       [](const Value& v, auto&, auto&) { return Value::string(html_escape(v.python_str())); }},
      {"e",
       [](const Value& v, auto&, auto&) { return Value::string(html_escape(v.python_str())); }},
      {"lower",
       [](const Value& v, auto&, auto&) { return Value::string(python_lower(v.python_str())); }},
      {"upper",
       [](const Value& v, auto&, auto&) { return Value::string(python_upper(v.python_str())); }},
      {"title",
       [](const Value& v, auto&, auto&) { return Value::string(jinja_title(v.python_str())); }},
      {"replace",
       [](const Value& v, const CallArgs& a, auto& l) {
         Params p("replace", a, {"old", "new", "count"});
         const int64_t count =
             p.get(2).is_undefined() || p.get(2).is_none() ? -1 : p.get(2).as_int();
         return Value::string(python_replace(v.python_str(), p.get(0).python_str(),
                                             p.get(1).python_str(), count, l));
       }},
      {"trim",
       [](const Value& v, const CallArgs& a, auto&) {
         Params p("trim", a, {"chars"});
         return Value::string(python_strip(v.python_str(), p.get(0), true, true));
       }},
      {"wordcount",
       [](const Value& v, auto&, auto&) { return Value::integer(word_count(v.python_str())); }},
      {"safe", [](const Value& v, auto&, auto&) { return Value::string(v.python_str()); }},
      {"string", [](const Value& v, auto&, auto&) { return Value::string(v.python_str()); }},
      {"indent", filter_indent},
  };
}

// Filters on lists, mappings and other iterables.
FilterTable sequence_filters() {
  return {
      {"count", [](const Value& v, auto&, auto&) { return Value::integer(length_of(v)); }},
      {"length", [](const Value& v, auto&, auto&) { return Value::integer(length_of(v)); }},
      {"first",
       [](const Value& v, auto&, auto&) {
         const std::vector<Value> items = items_of(v, "first");
         return items.empty() ? Value::undefined("first") : items.front();
       }},
      {"last",
       [](const Value& v, auto&, auto&) {
         const std::vector<Value> items = items_of(v, "last");
         return items.empty() ? Value::undefined("last") : items.back();
       }},
      {"items",
       [](const Value& v, auto&, auto& l) {
         if (v.is_undefined()) return Value::list({});
         if (!v.is_dict())
           fail("items: can only get item pairs from a mapping, got {}", v.type_name());
         return get_attribute(v, "items", l).as_callable().call(CallArgs{});
       }},
      {"join", filter_join},
      {"list", [](const Value& v, auto&, auto&) { return Value::list(items_of(v, "list")); }},
      {"map", filter_map},
      {"max",
       [](const Value& v, const CallArgs& a, auto& l) { return filter_min_max(v, a, true, l); }},
      {"min",
       [](const Value& v, const CallArgs& a, auto& l) { return filter_min_max(v, a, false, l); }},
      {"select", [](const Value& v, const CallArgs& a,
                    auto& l) { return filter_select(v, a, false, true, l); }},
      {"reject", [](const Value& v, const CallArgs& a,
                    auto& l) { return filter_select(v, a, false, false, l); }},
      {"selectattr", [](const Value& v, const CallArgs& a,
                        auto& l) { return filter_select(v, a, true, true, l); }},
      {"rejectattr", [](const Value& v, const CallArgs& a,
                        auto& l) { return filter_select(v, a, true, false, l); }},
      {"reverse",
       [](const Value& v, auto&, auto&) {
         if (v.is_string()) {
           std::u32string points = to_code_points(v.as_string());
           std::reverse(points.begin(), points.end());
           return Value::string(from_code_points(points));
         }
         std::vector<Value> items = items_of(v, "reverse");
         std::reverse(items.begin(), items.end());
         return Value::list(std::move(items));
       }},
      {"sort", filter_sort},
      {"sum", filter_sum},
      {"unique", filter_unique},
      {"dictsort", [](const Value& v, const CallArgs& a, auto&) { return filter_dictsort(v, a); }},
  };
}

// Filters on numbers and on any value.
FilterTable value_filters() {
  return {
      {"abs",
       [](const Value& v, auto&, auto&) {
         if (v.is_float()) return Value::floating(std::fabs(v.as_double()));
         if (!v.is_number()) fail("bad operand type for abs(): '{}'", v.type_name());
         if (v.as_int() == INT64_MIN) fail("integer overflow in abs()");
         return Value::integer(std::llabs(v.as_int()));
       }},
      {"default", [](const Value& v, const CallArgs& a, auto&) { return filter_default(v, a); }},
      {"d", [](const Value& v, const CallArgs& a, auto&) { return filter_default(v, a); }},
      {"float", [](const Value& v, const CallArgs& a, auto&) { return filter_float(v, a); }},
      {"int", [](const Value& v, const CallArgs& a, auto&) { return filter_int(v, a); }},
      {"round", [](const Value& v, const CallArgs& a, auto&) { return filter_round(v, a); }},
      {"tojson", filter_tojson},
  };
}

const FilterTable& filters() {
  static const FilterTable table = [] {
    FilterTable all = string_filters();
    all.merge(sequence_filters());
    all.merge(value_filters());
    return all;
  }();
  return table;
}

}  // namespace

bool filter_exists(const std::string& name) { return filters().count(name) != 0; }

Value apply_filter(const std::string& name, const Value& operand, const CallArgs& args,
                   const RenderLimits& limits) {
  const auto it = filters().find(name);
  if (it == filters().end()) fail("no filter named '{}'", name);
  return it->second(operand, args, limits);
}

}  // namespace shardtrain::chat
