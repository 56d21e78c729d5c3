#include "data/chat/operators.h"

#include <cmath>
#include <limits>

#include "core/error.h"

namespace shardtrain::chat {

void check_string_size(size_t bytes, const RenderLimits& limits) {
  if (bytes > limits.max_output_bytes) {
    fail("the template built a string of {} bytes, over the limit of {} bytes", bytes,
         limits.max_output_bytes);
  }
}

void check_list_size(size_t items, const RenderLimits& limits) {
  if (items > limits.max_output_bytes) {
    fail("the template built a list of {} items, over the limit of {}", items,
         limits.max_output_bytes);
  }
}

void require_defined(const Value& value) {
  if (!value.is_undefined()) return;
  if (value.undefined_name().empty()) fail("a value is undefined");
  fail("'{}' is undefined", value.undefined_name());
}

namespace {

[[noreturn]] void unsupported(const std::string& op, const Value& a, const Value& b) {
  fail("unsupported operand type(s) for {}: '{}' and '{}'", op, a.type_name(), b.type_name());
}

void check_overflow(bool overflow) {
  if (overflow) fail("integer overflow in the template's arithmetic");
}

Value repeat(const Value& sequence, int64_t count, const RenderLimits& limits) {
  const size_t times = count < 0 ? 0 : static_cast<size_t>(count);
  if (sequence.is_string()) {
    const size_t unit = sequence.as_string().size();
    if (unit != 0 && times > limits.max_output_bytes / unit + 1)
      check_string_size(SIZE_MAX, limits);
    check_string_size(unit * times, limits);
    std::string out;
    out.reserve(unit * times);
    for (size_t i = 0; i < times; ++i) out += sequence.as_string();
    return Value::string(std::move(out));
  }
  const auto& items = sequence.as_list().items;
  if (!items.empty() && times > limits.max_output_bytes / items.size() + 1) {
    check_list_size(SIZE_MAX, limits);
  }
  check_list_size(items.size() * times, limits);
  std::vector<Value> out;
  for (size_t i = 0; i < times; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), sequence.as_list().is_tuple);
}

double floor_mod(double a, double b) {
  const double r = std::fmod(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

Value int_arithmetic(const std::string& op, int64_t a, int64_t b) {
  int64_t r = 0;
  if (op == "+") {
    check_overflow(__builtin_add_overflow(a, b, &r));
    return Value::integer(r);
  }
  if (op == "-") {
    check_overflow(__builtin_sub_overflow(a, b, &r));
    return Value::integer(r);
  }
  if (op == "*") {
    check_overflow(__builtin_mul_overflow(a, b, &r));
    return Value::integer(r);
  }
  if (op == "/") {
    if (b == 0) fail("division by zero");
    return Value::floating(static_cast<double>(a) / static_cast<double>(b));
  }
  if (op == "//" || op == "%") {
    if (b == 0) fail("integer division or modulo by zero");
    check_overflow(a == std::numeric_limits<int64_t>::min() && b == -1);
    int64_t q = a / b;
    int64_t m = a % b;
    if (m != 0 && ((m < 0) != (b < 0))) {
      q -= 1;
      m += b;
    }
    return Value::integer(op == "//" ? q : m);
  }
  // "**"
  if (b < 0) return Value::floating(std::pow(static_cast<double>(a), static_cast<double>(b)));
  int64_t result = 1;
  for (int64_t i = 0; i < b; ++i) {
    check_overflow(__builtin_mul_overflow(result, a, &result));
    if (result == 0 || result == 1) break;
  }
  return Value::integer(result);
}

Value float_arithmetic(const std::string& op, double a, double b) {
  if (op == "+") return Value::floating(a + b);
  if (op == "-") return Value::floating(a - b);
  if (op == "*") return Value::floating(a * b);
  if (op == "/") {
    if (b == 0) fail("float division by zero");
    return Value::floating(a / b);
  }
  if (op == "//") {
    if (b == 0) fail("float floor division by zero");
    return Value::floating(std::floor(a / b));
  }
  if (op == "%") {
    if (b == 0) fail("float modulo by zero");
    return Value::floating(floor_mod(a, b));
  }
  return Value::floating(std::pow(a, b));
}

}  // namespace

Value binary_operator(const std::string& op, const Value& left, const Value& right,
                      const RenderLimits& limits) {
  if (op == "~") {
    const std::string a = left.python_str();
    const std::string b = right.python_str();
    check_string_size(a.size() + b.size(), limits);
    return Value::string(a + b);
  }
  require_defined(left);
  require_defined(right);
  if (left.is_number() && right.is_number()) {
    if (left.is_float() || right.is_float()) {
      return float_arithmetic(op, left.as_double(), right.as_double());
    }
    return int_arithmetic(op, left.as_int(), right.as_int());
  }
  if (op == "+") {
    if (left.is_string() && right.is_string()) {
      check_string_size(left.as_string().size() + right.as_string().size(), limits);
      return Value::string(left.as_string() + right.as_string());
    }
    if (left.is_list() && right.is_list()) {
      const auto& a = left.as_list().items;
      const auto& b = right.as_list().items;
      check_list_size(a.size() + b.size(), limits);
      std::vector<Value> items(a);
      items.insert(items.end(), b.begin(), b.end());
      return Value::list(std::move(items), left.as_list().is_tuple);
    }
    if (left.is_string() || right.is_string()) {
      fail("can only concatenate str (not \"{}\") to str; use ~ to join text and other values",
           left.is_string() ? right.type_name() : left.type_name());
    }
  }
  if (op == "*") {
    if ((left.is_string() || left.is_list()) && (right.is_int() || right.is_bool())) {
      return repeat(left, right.as_int(), limits);
    }
    if ((right.is_string() || right.is_list()) && (left.is_int() || left.is_bool())) {
      return repeat(right, left.as_int(), limits);
    }
  }
  if (op == "%" && left.is_string()) {
    fail("printf-style string formatting ('...' % value) is not supported; use ~ or format()");
  }
  unsupported(op, left, right);
}

bool contains(const Value& haystack, const Value& needle) {
  if (haystack.is_undefined()) return false;
  if (haystack.is_string()) {
    if (!needle.is_string()) {
      fail("'in <string>' requires string as left operand, not {}", needle.type_name());
    }
    return haystack.as_string().find(needle.as_string()) != std::string::npos;
  }
  if (haystack.is_list()) {
    for (const Value& item : haystack.as_list().items) {
      if (values_equal(item, needle)) return true;
    }
    return false;
  }
  if (haystack.is_dict() || haystack.is_namespace()) {
    return needle.is_string() && haystack.as_dict().find(needle.as_string()) != nullptr;
  }
  fail("argument of type '{}' is not iterable", haystack.type_name());
}

bool compare_operator(const std::string& op, const Value& left, const Value& right) {
  if (op == "==") return values_equal(left, right);
  if (op == "!=") return !values_equal(left, right);
  if (op == "in") return contains(right, left);
  if (op == "not in") return !contains(right, left);
  require_defined(left);
  require_defined(right);
  const int c = compare_values(left, right);
  if (op == "<") return c < 0;
  if (op == ">") return c > 0;
  if (op == "<=") return c <= 0;
  return c >= 0;
}

}  // namespace shardtrain::chat
