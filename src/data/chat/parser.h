// Parser for chat templates: tokens (data/chat/lexer.h) -> syntax tree (data/chat/ast.h), with
// Jinja2's grammar and operator precedence (loosest first): `x if c else y`, or, and, not,
// comparisons (== != < > <= >= in, not in), + -, ~, * / // %, unary - +, **, then filters
// (`| f(...)`), tests (`is [not] t(...)`), attributes, subscripts, slices and calls.
//
// Statements: if/elif/else, for (tuple targets, `if` filter, else), set (names, tuples, a
// namespace attribute, block set with filters), macro, filter blocks, break/continue
// (loopcontrols), generation (transformers' assistant-span extension), raw.
// Anything else (include, import, extends, block, call, with, do, ...) is refused:
// Error "line L, column C: ... not supported in chat templates" so a template never renders
// differently from Jinja2 silently. Nesting deeper than kMaxNesting is refused too, and so is an
// expression tree taller than kMaxExprHeight (a chain of 100,000 filters or `+` is parsed by a
// loop, but the tree it builds would be walked and freed recursively): a hostile template
// cannot exhaust the stack.
#pragma once

#include <string>

#include "data/chat/ast.h"

namespace shardtrain::chat {

inline constexpr int kMaxNesting = 200;
inline constexpr int kMaxExprHeight = 400;

TemplateAst parse_template(const std::string& source);

}  // namespace shardtrain::chat
