#include "data/chat/renderer.h"

#include <unordered_map>

#include "core/error.h"
#include "data/chat/filters.h"
#include "data/chat/methods.h"
#include "data/chat/operators.h"
#include "data/chat/tests.h"

namespace shardtrain::chat {
namespace {

// Nested evaluations (expression levels plus macro calls) per render: a few hundred bytes of
// stack each, far below the 8 MiB main-thread stack even with the statement recursion.
constexpr int kMaxEvalDepth = 2000;

// An Error that already carries its template line/column.
class LocatedError : public Error {
 public:
  using Error::Error;
};

struct Scope {
  std::unordered_map<std::string, Value> vars;
  Scope* parent = nullptr;
};

enum class Flow { kNormal, kBreak, kContinue };

class Renderer {
 public:
  Renderer(const ValueDict& variables, const ValueDict& globals, const RenderLimits& limits)
      : variables_(variables), globals_(globals), limits_(limits) {}

  RenderOutput run(const TemplateAst& ast) {
    out_ = &output_.text;
    exec_body(ast.body, root_);
    return std::move(output_);
  }

 private:
  template <typename Node, typename F>
  auto located(const Node& node, F&& body) -> decltype(body()) {
    try {
      return body();
    } catch (const LocatedError&) {
      throw;
    } catch (const Error& error) {
      throw LocatedError(
          fmt::format("line {}, column {}: {}", node.line, node.column, error.what()));
    }
  }

  void step() {
    if (++steps_ > limits_.max_steps) {
      fail(
          "the template ran more than {} steps (statements, loop iterations and calls); it "
          "looks like it never ends",
          limits_.max_steps);
    }
  }

  void write(const std::string& text) {
    *out_ += text;
    check_string_size(out_->size(), limits_);
  }

  // ---- names ----

  Value lookup(const std::string& name, Scope& scope) const {
    for (const Scope* s = &scope; s; s = s->parent) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return it->second;
    }
    if (const Value* v = variables_.find(name)) return *v;
    if (const Value* v = globals_.find(name)) return *v;
    return Value::undefined(name);
  }

  void assign_targets(const std::vector<std::string>& targets, const Value& value, Scope& scope) {
    if (targets.size() == 1) {
      scope.vars[targets[0]] = value;
      return;
    }
    if (!value.is_list()) fail("cannot unpack a non-sequence {}", value.type_name());
    const auto& items = value.as_list().items;
    if (items.size() != targets.size()) {
      fail("{} values to unpack (expected {}, got {})",
           items.size() < targets.size() ? "not enough" : "too many", targets.size(), items.size());
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.vars[targets[i]] = items[i];
  }

  // ---- statements ----

  Flow exec_body(const Body& body, Scope& scope) {
    for (const StmtPtr& stmt : body) {
      const Flow flow = located(*stmt, [&] { return exec(*stmt, scope); });
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& stmt, Scope& scope) {
    step();
    switch (stmt.kind) {
      case Stmt::Kind::kText:
        write(stmt.text);
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        write(eval(*stmt.expr, scope).python_str());
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        return exec_body(eval(*stmt.expr, scope).truthy() ? stmt.body : stmt.else_body, scope);
      case Stmt::Kind::kFor:
        return exec_for(stmt, scope);
      case Stmt::Kind::kSet:
        exec_set(stmt, scope);
        return Flow::kNormal;
      case Stmt::Kind::kSetBlock:
        scope.vars[stmt.targets[0]] = apply_filters(stmt, capture(stmt.body, scope), scope);
        return Flow::kNormal;
      case Stmt::Kind::kFilterBlock:
        write(apply_filters(stmt, capture(stmt.body, scope), scope).python_str());
        return Flow::kNormal;
      case Stmt::Kind::kMacro:
        define_macro(stmt, scope);
        return Flow::kNormal;
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kGeneration:
        return exec_generation(stmt, scope);
    }
    return Flow::kNormal;
  }

  Flow exec_generation(const Stmt& stmt, Scope& scope) {
    const bool top_level = out_ == &output_.text;
    const size_t begin = out_->size();
    const Flow flow = exec_body(stmt.body, scope);
    if (top_level) output_.generation_spans.emplace_back(begin, out_->size());
    return flow;
  }

  void exec_set(const Stmt& stmt, Scope& scope) {
    Value value = eval(*stmt.expr, scope);
    if (stmt.attribute.empty()) {
      assign_targets(stmt.targets, value, scope);
      return;
    }
    const Value target = lookup(stmt.targets[0], scope);
    if (!target.is_namespace()) {
      fail("cannot assign attribute '{}' on '{}', which is not a namespace", stmt.attribute,
           stmt.targets[0]);
    }
    // A namespace holding a namespace could hold itself: a cycle that printing would follow
    // forever and reference counting would never free.
    if (value.depth() >= kNamespaceDepth) {
      fail("cannot assign a namespace (or a value nested deeper than {} levels) to '{}.{}'",
           kNamespaceDepth - 1, stmt.targets[0], stmt.attribute);
    }
    target.namespace_attributes().set(stmt.attribute, std::move(value));
  }

  Value capture(const Body& body, Scope& scope) {
    std::string buffer;
    std::string* saved = out_;
    out_ = &buffer;
    try {
      exec_body(body, scope);
    } catch (...) {
      out_ = saved;
      throw;
    }
    out_ = saved;
    return Value::string(std::move(buffer));
  }

  Value apply_filters(const Stmt& stmt, Value value, Scope& scope) {
    for (const ExprPtr& filter : stmt.filters) {
      value = located(*filter, [&] { return eval_filter(*filter, value, scope); });
    }
    return value;
  }

  static std::vector<Value> iteration_items(const Value& iterable) {
    if (iterable.is_undefined()) return {};
    if (iterable.is_list()) return iterable.as_list().items;
    if (iterable.is_dict()) {
      std::vector<Value> keys;
      for (const auto& entry : iterable.as_dict().entries)
        keys.push_back(Value::string(entry.first));
      return keys;
    }
    if (iterable.is_string()) {
      std::vector<Value> chars;
      for (char32_t cp : to_code_points(iterable.as_string())) {
        chars.push_back(Value::string(from_code_points(std::u32string(1, cp))));
      }
      return chars;
    }
    fail("'{}' object is not iterable", iterable.type_name());
  }

  static Value loop_value(const std::vector<Value>& items, size_t i) {
    const int64_t n = static_cast<int64_t>(items.size());
    const int64_t index = static_cast<int64_t>(i);
    ValueDict loop;
    loop.set("index", Value::integer(index + 1));
    loop.set("index0", Value::integer(index));
    loop.set("revindex", Value::integer(n - index));
    loop.set("revindex0", Value::integer(n - index - 1));
    loop.set("first", Value::boolean(i == 0));
    loop.set("last", Value::boolean(index == n - 1));
    loop.set("length", Value::integer(n));
    loop.set("depth", Value::integer(1));
    loop.set("depth0", Value::integer(0));
    loop.set("previtem", i > 0 ? items[i - 1] : Value::undefined("previtem"));
    loop.set("nextitem", index + 1 < n ? items[i + 1] : Value::undefined("nextitem"));
    loop.set("cycle", Value::callable("cycle", [i](const CallArgs& args) {
               if (args.positional.empty()) fail("loop.cycle() needs at least one value");
               return args.positional[i % args.positional.size()];
             }));
    return Value::dict(std::move(loop));
  }

  Flow exec_for(const Stmt& stmt, Scope& scope) {
    std::vector<Value> items = iteration_items(eval(*stmt.expr, scope));
    Scope loop_scope;
    loop_scope.parent = &scope;
    if (stmt.filter) {
      std::vector<Value> kept;
      for (const Value& item : items) {
        step();
        assign_targets(stmt.targets, item, loop_scope);
        if (eval(*stmt.filter, loop_scope).truthy()) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) return exec_body(stmt.else_body, scope);
    for (size_t i = 0; i < items.size(); ++i) {
      step();
      assign_targets(stmt.targets, items[i], loop_scope);
      loop_scope.vars["loop"] = loop_value(items, i);
      if (exec_body(stmt.body, loop_scope) == Flow::kBreak) break;
    }
    return Flow::kNormal;
  }

  void define_macro(const Stmt& stmt, Scope& scope) {
    const Stmt* macro = &stmt;
    scope.vars[stmt.name] = Value::callable(
        stmt.name, [this, macro](const CallArgs& args) { return call_macro(*macro, args); });
  }

  Value call_macro(const Stmt& macro, const CallArgs& args) {
    if (args.positional.size() > macro.params.size()) {
      fail("macro '{}' takes not more than {} argument(s)", macro.name, macro.params.size());
    }
    if (call_depth_ >= limits_.max_call_depth) {
      fail("macro calls nested deeper than {} (endless recursion?)", limits_.max_call_depth);
    }
    Scope scope;
    scope.parent = &root_;
    for (const auto& keyword : args.keyword) {
      const std::string& key = keyword.first;  // clang 14 cannot capture a structured binding
      const bool known = std::any_of(macro.params.begin(), macro.params.end(),
                                     [&](const auto& p) { return p.first == key; });
      if (!known) fail("macro '{}' has no parameter named '{}'", macro.name, key);
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [param, default_value] = macro.params[i];
      if (i < args.positional.size()) {
        scope.vars[param] = args.positional[i];
      } else if (const Value* keyword = args.keyword_arg(param)) {
        scope.vars[param] = *keyword;
      } else if (default_value) {
        scope.vars[param] = eval(*default_value, scope);
      } else {
        scope.vars[param] = Value::undefined(param);
      }
    }
    ++call_depth_;
    struct Depth {
      int& depth;
      ~Depth() { --depth; }
    } depth{call_depth_};
    return capture(macro.body, scope);
  }

  // ---- expressions ----

  Value eval(const Expr& expr, Scope& scope) {
    // The parser bounds one expression's height; macros calling macros multiply it, so the
    // evaluator bounds the sum over the whole render (the thread's stack is fixed).
    if (eval_depth_ >= kMaxEvalDepth) {
      fail("expressions and macro calls nested deeper than {} levels in total", kMaxEvalDepth);
    }
    ++eval_depth_;
    struct EvalDepth {
      int& depth;
      ~EvalDepth() { --depth; }
    } eval_depth{eval_depth_};
    return located(expr, [&] {
      Value value = eval_node(expr, scope);
      if (value.is_string()) check_string_size(value.as_string().size(), limits_);
      return value;
    });
  }

  CallArgs eval_args(const Expr& expr, size_t first, Scope& scope) {
    CallArgs args;
    for (size_t i = first; i < expr.children.size(); ++i) {
      args.positional.push_back(eval(*expr.children[i], scope));
    }
    for (const auto& [key, value] : expr.keywords) {
      args.keyword.emplace_back(key, eval(*value, scope));
    }
    return args;
  }

  Value eval_filter(const Expr& expr, const Value& operand, Scope& scope) {
    return apply_filter(expr.name, operand, eval_args(expr, 1, scope), limits_);
  }

  Value eval_node(const Expr& expr, Scope& scope) {
    switch (expr.kind) {
      case Expr::Kind::kConstant:
        return expr.constant;
      case Expr::Kind::kName:
        return lookup(expr.name, scope);
      case Expr::Kind::kList:
      case Expr::Kind::kTuple: {
        std::vector<Value> items;
        for (const ExprPtr& child : expr.children) items.push_back(eval(*child, scope));
        return Value::list(std::move(items), expr.kind == Expr::Kind::kTuple);
      }
      case Expr::Kind::kDict:
        return eval_dict(expr, scope);
      case Expr::Kind::kGetAttr:
        return get_attribute(eval(*expr.children[0], scope), expr.name, limits_);
      case Expr::Kind::kGetItem:
        return get_item(eval(*expr.children[0], scope), eval(*expr.children[1], scope), limits_);
      case Expr::Kind::kSlice:
        return slice_value(eval(*expr.children[0], scope), optional(expr.children[1], scope),
                           optional(expr.children[2], scope), optional(expr.children[3], scope));
      case Expr::Kind::kCall:
        return eval_call(expr, scope);
      case Expr::Kind::kFilter:
        return eval_filter(expr, eval(*expr.children[0], scope), scope);
      case Expr::Kind::kTest: {
        const Value operand = eval(*expr.children[0], scope);
        const CallArgs args = eval_args(expr, 1, scope);
        return Value::boolean(apply_test(expr.name, operand, args.positional) != expr.negated);
      }
      case Expr::Kind::kUnary:
        return eval_unary(expr, scope);
      case Expr::Kind::kBinary:
        return eval_binary(expr, scope);
      case Expr::Kind::kCompare:
        return eval_compare(expr, scope);
      case Expr::Kind::kConditional:
        if (eval(*expr.children[1], scope).truthy()) return eval(*expr.children[0], scope);
        return expr.children[2] ? eval(*expr.children[2], scope) : Value::undefined();
    }
    return Value::undefined();
  }

  Value optional(const ExprPtr& expr, Scope& scope) {
    return expr ? eval(*expr, scope) : Value::none();
  }

  Value eval_dict(const Expr& expr, Scope& scope) {
    ValueDict dict;
    for (size_t i = 0; i + 1 < expr.children.size(); i += 2) {
      const Value key = eval(*expr.children[i], scope);
      if (!key.is_string())
        fail("dict keys in chat templates must be strings, got {}", key.type_name());
      dict.set(key.as_string(), eval(*expr.children[i + 1], scope));
    }
    return Value::dict(std::move(dict));
  }

  Value eval_call(const Expr& expr, Scope& scope) {
    const Value callee = eval(*expr.children[0], scope);
    const CallArgs args = eval_args(expr, 1, scope);
    step();
    require_defined(callee);
    if (!callee.is_callable()) fail("'{}' object is not callable", callee.type_name());
    return callee.as_callable().call(args);
  }

  Value eval_unary(const Expr& expr, Scope& scope) {
    const Value operand = eval(*expr.children[0], scope);
    if (expr.name == "not") return Value::boolean(!operand.truthy());
    require_defined(operand);
    if (!operand.is_number())
      fail("bad operand type for unary {}: '{}'", expr.name, operand.type_name());
    if (expr.name == "+") return operand.is_bool() ? Value::integer(operand.as_int()) : operand;
    if (operand.is_float()) return Value::floating(-operand.as_double());
    if (operand.as_int() == INT64_MIN) fail("integer overflow in the template's arithmetic");
    return Value::integer(-operand.as_int());
  }

  Value eval_binary(const Expr& expr, Scope& scope) {
    Value left = eval(*expr.children[0], scope);
    if (expr.name == "and") return left.truthy() ? eval(*expr.children[1], scope) : left;
    if (expr.name == "or") return left.truthy() ? left : eval(*expr.children[1], scope);
    return binary_operator(expr.name, left, eval(*expr.children[1], scope), limits_);
  }

  Value eval_compare(const Expr& expr, Scope& scope) {
    Value left = eval(*expr.children[0], scope);
    for (size_t i = 0; i < expr.compare_ops.size(); ++i) {
      Value right = eval(*expr.children[i + 1], scope);
      if (!compare_operator(expr.compare_ops[i], left, right)) return Value::boolean(false);
      left = std::move(right);
    }
    return Value::boolean(true);
  }

  const ValueDict& variables_;
  const ValueDict& globals_;
  const RenderLimits& limits_;
  Scope root_;
  RenderOutput output_;
  std::string* out_ = nullptr;
  uint64_t steps_ = 0;
  int call_depth_ = 0;
  int eval_depth_ = 0;
};

}  // namespace

RenderOutput render_ast(const TemplateAst& ast, const ValueDict& variables,
                        const ValueDict& globals, const RenderLimits& limits) {
  Renderer renderer(variables, globals, limits);
  return renderer.run(ast);
}

}  // namespace shardtrain::chat
