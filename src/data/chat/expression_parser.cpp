#include "data/chat/expression_parser.h"

#include <cerrno>
#include <cstdlib>
#include <set>

namespace shardtrain::chat {

// Sets node.height from its children; Error past kMaxExprHeight, while the tree is still
// short enough to free.
ExprPtr ExpressionParser::bounded(ExprPtr node) {
  int tallest = 0;
  for (const ExprPtr& child : node->children) {
    if (child) tallest = std::max(tallest, child->height);
  }
  for (const auto& keyword : node->keywords) {
    if (keyword.second) tallest = std::max(tallest, keyword.second->height);
  }
  node->height = tallest + 1;
  if (node->height > kMaxExprHeight) {
    error(current(), fmt::format("expression nested deeper than {} levels (a chain of that "
                                 "many operators, filters or calls)",
                                 kMaxExprHeight));
  }
  return node;
}

// Items separated by commas; a tuple when there is a comma (or "()"), else the one item.
ExprPtr ExpressionParser::parse_tuple(bool with_condexpr) {
  const Token& start = current();
  std::vector<ExprPtr> items;
  bool comma = false;
  while (true) {
    if (!items.empty()) {
      if (!skip_operator(",")) break;
      comma = true;
    }
    if (current().kind == TokenKind::kVariableEnd || current().kind == TokenKind::kBlockEnd ||
        is_operator(")") || (!items.empty() && is_name("if"))) {
      break;
    }
    items.push_back(parse_expression(with_condexpr));
  }
  if (items.size() == 1 && !comma) return std::move(items[0]);
  if (items.empty()) error(start, "expected an expression, found " + describe(start));
  auto tuple = node_at<Expr>(start);
  tuple->kind = Expr::Kind::kTuple;
  tuple->children = std::move(items);
  return bounded(std::move(tuple));
}

ExprPtr ExpressionParser::parse_expression(bool with_condexpr) {
  DepthGuard guard(*this);
  if (!with_condexpr) return parse_or();
  ExprPtr expr = parse_or();
  while (is_name("if")) {
    auto cond = node_at<Expr>(advance());
    cond->kind = Expr::Kind::kConditional;
    ExprPtr test = parse_or();
    ExprPtr otherwise;
    if (skip_name("else")) otherwise = parse_expression(true);
    cond->children.push_back(std::move(expr));
    cond->children.push_back(std::move(test));
    cond->children.push_back(std::move(otherwise));
    expr = bounded(std::move(cond));
  }
  return expr;
}

ExprPtr ExpressionParser::binary(const Token& at, std::string op, ExprPtr left, ExprPtr right) {
  auto node = node_at<Expr>(at);
  node->kind = Expr::Kind::kBinary;
  node->name = std::move(op);
  node->children.push_back(std::move(left));
  node->children.push_back(std::move(right));
  return bounded(std::move(node));
}

ExprPtr ExpressionParser::parse_or() {
  ExprPtr left = parse_and();
  while (is_name("or")) {
    const Token& at = advance();
    left = binary(at, "or", std::move(left), parse_and());
  }
  return left;
}

ExprPtr ExpressionParser::parse_and() {
  ExprPtr left = parse_not();
  while (is_name("and")) {
    const Token& at = advance();
    left = binary(at, "and", std::move(left), parse_not());
  }
  return left;
}

ExprPtr ExpressionParser::parse_not() {
  if (is_name("not")) {
    DepthGuard guard(*this);
    auto node = node_at<Expr>(advance());
    node->kind = Expr::Kind::kUnary;
    node->name = "not";
    node->children.push_back(parse_not());
    return bounded(std::move(node));
  }
  return parse_compare();
}

ExprPtr ExpressionParser::parse_compare() {
  const Token& start = current();
  ExprPtr first = parse_math1();
  auto node = node_at<Expr>(start);
  node->kind = Expr::Kind::kCompare;
  node->children.push_back(std::move(first));
  while (true) {
    static const std::set<std::string> kOps = {"==", "!=", "<", ">", "<=", ">="};
    if (current().kind == TokenKind::kOperator && kOps.count(current().value)) {
      node->compare_ops.push_back(advance().value);
    } else if (skip_name("in")) {
      node->compare_ops.push_back("in");
    } else if (is_name("not") && peek().kind == TokenKind::kName && peek().value == "in") {
      advance();
      advance();
      node->compare_ops.push_back("not in");
    } else {
      break;
    }
    node->children.push_back(parse_math1());
  }
  if (node->compare_ops.empty()) return std::move(node->children[0]);
  return bounded(std::move(node));
}

ExprPtr ExpressionParser::parse_math1() {
  ExprPtr left = parse_concat();
  while (is_operator("+") || is_operator("-")) {
    const Token& at = advance();
    left = binary(at, at.value, std::move(left), parse_concat());
  }
  return left;
}

ExprPtr ExpressionParser::parse_concat() {
  ExprPtr left = parse_math2();
  while (is_operator("~")) {
    const Token& at = advance();
    left = binary(at, "~", std::move(left), parse_math2());
  }
  return left;
}

ExprPtr ExpressionParser::parse_math2() {
  ExprPtr left = parse_pow();
  while (is_operator("*") || is_operator("/") || is_operator("//") || is_operator("%")) {
    const Token& at = advance();
    left = binary(at, at.value, std::move(left), parse_pow());
  }
  return left;
}

ExprPtr ExpressionParser::parse_pow() {
  ExprPtr left = parse_unary(true);
  while (is_operator("**")) {
    const Token& at = advance();
    left = binary(at, "**", std::move(left), parse_unary(true));
  }
  return left;
}

ExprPtr ExpressionParser::parse_unary(bool with_filter) {
  DepthGuard guard(*this);
  ExprPtr node;
  if (is_operator("-") || is_operator("+")) {
    node = node_at<Expr>(current());
    node->kind = Expr::Kind::kUnary;
    node->name = advance().value;
    node->children.push_back(parse_unary(false));
    node = bounded(std::move(node));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  if (with_filter) node = parse_filter_expr(std::move(node));
  return node;
}

int64_t ExpressionParser::integer_literal(const Token& token) const {
  errno = 0;
  const long long value = std::strtoll(token.value.c_str(), nullptr, 10);
  if (errno == ERANGE) error(token, "integer literal " + token.value + " is too large");
  return value;
}

ExprPtr ExpressionParser::constant(const Token& at, Value value) {
  auto node = node_at<Expr>(at);
  node->kind = Expr::Kind::kConstant;
  node->constant = std::move(value);
  return node;
}

ExprPtr ExpressionParser::parse_primary() {
  const Token& token = current();
  switch (token.kind) {
    case TokenKind::kName: {
      advance();
      const std::string& n = token.value;
      if (n == "true" || n == "True") return constant(token, Value::boolean(true));
      if (n == "false" || n == "False") return constant(token, Value::boolean(false));
      if (n == "none" || n == "None") return constant(token, Value::none());
      auto node = node_at<Expr>(token);
      node->kind = Expr::Kind::kName;
      node->name = n;
      return node;
    }
    case TokenKind::kString: {
      std::string text = advance().value;
      while (current().kind == TokenKind::kString) text += advance().value;
      return constant(token, Value::string(std::move(text)));
    }
    case TokenKind::kInteger:
      advance();
      return constant(token, Value::integer(integer_literal(token)));
    case TokenKind::kFloat:
      advance();
      return constant(token, Value::floating(std::strtod(token.value.c_str(), nullptr)));
    case TokenKind::kOperator:
      if (token.value == "(") {
        advance();
        if (skip_operator(")")) {
          auto empty = node_at<Expr>(token);
          empty->kind = Expr::Kind::kTuple;
          return empty;
        }
        ExprPtr inner = parse_tuple(true);
        expect_operator(")");
        return inner;
      }
      if (token.value == "[") return parse_list();
      if (token.value == "{") return parse_dict();
      break;
    default:
      break;
  }
  error(token, "expected an expression, found " + describe(token));
}

ExprPtr ExpressionParser::parse_list() {
  auto node = node_at<Expr>(advance());
  node->kind = Expr::Kind::kList;
  while (!skip_operator("]")) {
    if (!node->children.empty()) expect_operator(",");
    if (skip_operator("]")) break;
    node->children.push_back(parse_expression(true));
  }
  return bounded(std::move(node));
}

ExprPtr ExpressionParser::parse_dict() {
  auto node = node_at<Expr>(advance());
  node->kind = Expr::Kind::kDict;
  while (!skip_operator("}")) {
    if (!node->children.empty()) expect_operator(",");
    if (skip_operator("}")) break;
    node->children.push_back(parse_expression(true));
    expect_operator(":");
    node->children.push_back(parse_expression(true));
  }
  return bounded(std::move(node));
}

ExprPtr ExpressionParser::parse_postfix(ExprPtr node) {
  while (true) {
    if (is_operator(".") || is_operator("[")) {
      node = parse_subscript(std::move(node));
    } else if (is_operator("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_filter_expr(ExprPtr node) {
  while (true) {
    if (is_operator("|")) {
      advance();
      node = parse_filter(std::move(node));
    } else if (is_name("is")) {
      node = parse_test(std::move(node));
    } else if (is_operator("(")) {
      node = parse_call(std::move(node));
    } else {
      return node;
    }
  }
}

ExprPtr ExpressionParser::parse_subscript(ExprPtr target) {
  const Token& at = advance();
  if (at.value == ".") {
    const Token& attr = current();
    if (attr.kind == TokenKind::kInteger) {
      advance();
      auto node = node_at<Expr>(at);
      node->kind = Expr::Kind::kGetItem;
      node->children.push_back(std::move(target));
      node->children.push_back(constant(attr, Value::integer(integer_literal(attr))));
      return bounded(std::move(node));
    }
    auto node = node_at<Expr>(at);
    node->kind = Expr::Kind::kGetAttr;
    node->name = expect_name();
    node->children.push_back(std::move(target));
    return bounded(std::move(node));
  }
  // "[" index or slice "]"
  auto node = node_at<Expr>(at);
  node->children.push_back(std::move(target));
  ExprPtr start;
  if (!is_operator(":")) start = parse_expression(true);
  if (!skip_operator(":")) {
    node->kind = Expr::Kind::kGetItem;
    node->children.push_back(std::move(start));
    expect_operator("]");
    return bounded(std::move(node));
  }
  node->kind = Expr::Kind::kSlice;
  ExprPtr stop;
  ExprPtr step;
  if (!is_operator("]") && !is_operator(":")) stop = parse_expression(true);
  if (skip_operator(":") && !is_operator("]")) step = parse_expression(true);
  expect_operator("]");
  node->children.push_back(std::move(start));
  node->children.push_back(std::move(stop));
  node->children.push_back(std::move(step));
  return bounded(std::move(node));
}

// "(" args ")" into node->children[first..] and node->keywords.
void ExpressionParser::parse_arguments(Expr& node) {
  expect_operator("(");
  bool first = true;
  while (!skip_operator(")")) {
    if (!first) expect_operator(",");
    first = false;
    if (skip_operator(")")) break;
    if (is_operator("*") || is_operator("**")) {
      error(current(), "*args and **kwargs calls are not supported in chat templates");
    }
    if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
        peek().value == "=") {
      std::string key = advance().value;
      advance();
      node.keywords.emplace_back(std::move(key), parse_expression(true));
    } else {
      if (!node.keywords.empty()) {
        error(current(), "a positional argument follows a keyword argument");
      }
      node.children.push_back(parse_expression(true));
    }
  }
}

ExprPtr ExpressionParser::parse_call(ExprPtr callee) {
  auto node = std::make_unique<Expr>();
  node->line = callee->line;
  node->column = callee->column;
  node->kind = Expr::Kind::kCall;
  node->children.push_back(std::move(callee));
  parse_arguments(*node);
  return bounded(std::move(node));
}

ExprPtr ExpressionParser::parse_filter(ExprPtr operand) {
  auto node = node_at<Expr>(current());
  node->kind = Expr::Kind::kFilter;
  node->name = expect_name();
  while (is_operator(".")) {  // dotted filter names
    advance();
    node->name += "." + expect_name();
  }
  node->children.push_back(std::move(operand));
  if (is_operator("(")) parse_arguments(*node);
  return bounded(std::move(node));
}

ExprPtr ExpressionParser::parse_test(ExprPtr operand) {
  auto node = node_at<Expr>(advance());
  node->kind = Expr::Kind::kTest;
  node->negated = skip_name("not");
  node->name = expect_name();
  node->children.push_back(std::move(operand));
  if (is_operator("(")) {
    parse_arguments(*node);
    return bounded(std::move(node));
  }
  const Token& next = current();
  const bool starts_primary = next.kind == TokenKind::kName || next.kind == TokenKind::kString ||
                              next.kind == TokenKind::kInteger || next.kind == TokenKind::kFloat ||
                              (next.kind == TokenKind::kOperator &&
                               (next.value == "(" || next.value == "[" || next.value == "{"));
  if (starts_primary && !is_name("else") && !is_name("or") && !is_name("and")) {
    if (is_name("is")) error(next, "\"is\" cannot follow a test name");
    node->children.push_back(parse_postfix(parse_primary()));
  }
  return bounded(std::move(node));
}

}  // namespace shardtrain::chat
