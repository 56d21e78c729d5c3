// ExpressionParser: Jinja2's expression grammar over a TokenCursor, with its operator precedence
// (loosest first): `x if c else y`, or, and, not, comparisons (== != < > <= >= in, not in),
// + -, ~, * / // %, unary - +, **, then filters (`| f(...)`), tests (`is [not] t(...)`),
// attributes, subscripts, slices and calls. Every node it builds records its height, and a tree
// taller than kMaxExprHeight is an Error (data/chat/parser.h). The statement parser derives
// from it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "data/chat/ast.h"
#include "data/chat/token_cursor.h"

namespace shardtrain::chat {

class ExpressionParser : public TokenCursor {
 public:
  using TokenCursor::TokenCursor;

 protected:
  // Items separated by commas; a tuple when there is a comma (or "()"), else the one item.
  ExprPtr parse_tuple(bool with_condexpr);
  ExprPtr parse_expression(bool with_condexpr);
  // The filter after a "|": name, dotted parts, arguments; `operand` may be null (filter
  // blocks and block sets apply it later).
  ExprPtr parse_filter(ExprPtr operand);

 private:
  ExprPtr bounded(ExprPtr node);
  ExprPtr binary(const Token& at, std::string op, ExprPtr left, ExprPtr right);
  ExprPtr parse_or();
  ExprPtr parse_and();
  ExprPtr parse_not();
  ExprPtr parse_compare();
  ExprPtr parse_math1();
  ExprPtr parse_concat();
  ExprPtr parse_math2();
  ExprPtr parse_pow();
  ExprPtr parse_unary(bool with_filter);
  int64_t integer_literal(const Token& token) const;
  ExprPtr constant(const Token& at, Value value);
  ExprPtr parse_primary();
  ExprPtr parse_list();
  ExprPtr parse_dict();
  ExprPtr parse_postfix(ExprPtr node);
  ExprPtr parse_filter_expr(ExprPtr node);
  ExprPtr parse_subscript(ExprPtr target);
  void parse_arguments(Expr& node);
  ExprPtr parse_call(ExprPtr callee);
  ExprPtr parse_test(ExprPtr operand);
};

}  // namespace shardtrain::chat
