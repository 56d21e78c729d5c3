#include "data/chat/template.h"

#include <cmath>
#include <ctime>

#include "core/error.h"
#include "data/chat/operators.h"
#include "data/chat/parser.h"

namespace shardtrain::chat {
namespace {

int64_t range_arg(const Value& v) {
  if (!v.is_int() && !v.is_bool())
    fail("range() arguments must be integers, got {}", v.type_name());
  return v.as_int();
}

Value range_function(const CallArgs& args, const RenderLimits& limits) {
  const auto& a = args.positional;
  if (a.empty() || a.size() > 3) fail("range() takes 1 to 3 integer arguments");
  const int64_t start = a.size() == 1 ? 0 : range_arg(a[0]);
  const int64_t stop = range_arg(a.size() == 1 ? a[0] : a[1]);
  const int64_t step = a.size() == 3 ? range_arg(a[2]) : 1;
  if (step == 0) fail("range() arg 3 must not be zero");
  const long double count_ld =
      step > 0 ? (static_cast<long double>(stop) - start) / step
               : (static_cast<long double>(start) - stop) / -static_cast<long double>(step);
  const size_t count = count_ld <= 0 ? 0 : static_cast<size_t>(std::ceil(count_ld));
  check_list_size(count, limits);
  std::vector<Value> items;
  items.reserve(count);
  for (size_t i = 0; i < count; ++i) {
    items.push_back(Value::integer(start + static_cast<int64_t>(i) * step));
  }
  return Value::list(std::move(items));
}

ValueDict keyword_dict(const CallArgs& args, const char* function) {
  ValueDict dict;
  if (!args.positional.empty()) {
    if (args.positional.size() > 1 || !args.positional[0].is_dict()) {
      fail("{}() takes a dict or keyword arguments", function);
    }
    dict = args.positional[0].as_dict();
  }
  for (const auto& [key, value] : args.keyword) dict.set(key, value);
  return dict;
}

std::string strftime_now(const CallArgs& args) {
  if (args.positional.size() != 1 || !args.positional[0].is_string()) {
    fail("strftime_now() takes one format string");
  }
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[512];
  const size_t n =
      std::strftime(buffer, sizeof(buffer), args.positional[0].as_string().c_str(), &local);
  return std::string(buffer, n);
}

ValueDict make_globals(const RenderLimits& limits) {
  ValueDict globals;
  globals.set("range", Value::callable("range", [limits](const CallArgs& args) {
                return range_function(args, limits);
              }));
  globals.set("namespace", Value::callable("namespace", [](const CallArgs& args) {
                return Value::make_namespace(keyword_dict(args, "namespace"));
              }));
  globals.set("dict", Value::callable("dict", [](const CallArgs& args) {
                return Value::dict(keyword_dict(args, "dict"));
              }));
  globals.set("raise_exception",
              Value::callable("raise_exception", [](const CallArgs& args) -> Value {
                fail("the template raised an exception: {}",
                     args.positional.empty() ? "" : args.positional[0].python_str());
              }));
  globals.set("strftime_now", Value::callable("strftime_now", [](const CallArgs& args) {
                return Value::string(strftime_now(args));
              }));
  return globals;
}

}  // namespace

Template::Template(const std::string& source)
    : ast_(std::make_shared<const TemplateAst>(parse_template(source))) {}

RenderOutput Template::render(const ValueDict& variables, const RenderLimits& limits) const {
  return render_ast(*ast_, variables, make_globals(limits), limits);
}

}  // namespace shardtrain::chat
