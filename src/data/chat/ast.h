// The syntax tree of a chat template, as the parser (data/chat/parser.h) builds it and the
// renderer (data/chat/renderer.h) walks it. Every node keeps the template line/column it came
// from, for error messages.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "data/chat/value.h"

namespace shardtrain::chat {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kConstant,     // constant
    kName,         // name
    kList,         // children = items
    kTuple,        // children = items
    kDict,         // children = key0, value0, key1, value1, ...
    kGetAttr,      // children[0].name
    kGetItem,      // children[0][children[1]]
    kSlice,        // children[0][children[1]:children[2]:children[3]], absent parts null
    kCall,         // children[0](children[1..], keywords)
    kFilter,       // children[0] | name(children[1..], keywords)
    kTest,         // children[0] is [not] name(children[1..])
    kUnary,        // name = "not" | "-" | "+"; children[0]
    kBinary,       // name = "+" "-" "*" "/" "//" "%" "**" "~" "and" "or"; children[0], [1]
    kCompare,      // children[0] op0 children[1] op1 children[2] ... (ops in compare_ops)
    kConditional,  // children[0] if children[1] else children[2] (null: undefined)
  };
  Kind kind = Kind::kConstant;
  int line = 0;
  int column = 0;
  Value constant;
  std::string name;
  bool negated = false;  // kTest: "is not"
  std::vector<ExprPtr> children;
  std::vector<std::pair<std::string, ExprPtr>> keywords;
  std::vector<std::string> compare_ops;  // "==" "!=" "<" ">" "<=" ">=" "in" "not in"
  int height = 1;  // 1 + the tallest child; the parser refuses trees past kMaxExprHeight
};

struct Stmt;
using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,         // text
    kOutput,       // {{ expr }}
    kIf,           // if expr: body else else_body (elif = an If alone in else_body)
    kFor,          // for targets in expr [if filter]: body else else_body
    kSet,          // set targets = expr, or set targets[0].attribute = expr (namespace)
    kSetBlock,     // set targets[0] %} body {% endset, then filters (kFilter exprs, operand null)
    kMacro,        // macro name(params) body
    kFilterBlock,  // filter filters %} body {% endfilter
    kBreak,
    kContinue,
    kGeneration,  // generation %} body {% endgeneration
  };
  Kind kind = Kind::kText;
  int line = 0;
  int column = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;
  std::vector<std::string> targets;
  std::string attribute;                                // kSet on a namespace attribute
  std::string name;                                     // kMacro
  std::vector<std::pair<std::string, ExprPtr>> params;  // kMacro; default null when required
  std::vector<ExprPtr> filters;                         // kSetBlock, kFilterBlock
  Body body;
  Body else_body;
};

struct TemplateAst {
  Body body;
};

}  // namespace shardtrain::chat
