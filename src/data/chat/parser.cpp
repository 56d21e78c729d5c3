#include "data/chat/parser.h"

#include <set>

#include "core/error.h"
#include "data/chat/expression_parser.h"
#include "data/chat/lexer.h"

namespace shardtrain::chat {
namespace {

// The statement grammar; expressions come from ExpressionParser.
class Parser : public ExpressionParser {
 public:
  using ExpressionParser::ExpressionParser;

  TemplateAst run() {
    TemplateAst ast;
    const std::string end = parse_body(ast.body, {});
    if (!end.empty()) error(current(), "unexpected \"" + end + "\"");
    return ast;
  }

 private:
  // ---- statements ----

  // Parses statements into `body` until a block tag whose keyword is in `ends`; returns that
  // keyword with the stream on the token after it, or "" at the end of the template.
  std::string parse_body(Body& body, const std::set<std::string>& ends) {
    DepthGuard guard(*this);
    while (true) {
      const Token& token = current();
      if (token.kind == TokenKind::kEnd) {
        if (!ends.empty()) {
          error(token, "unexpected end of template; expected \"" + *ends.begin() + "\"");
        }
        return "";
      }
      if (token.kind == TokenKind::kData) {
        auto stmt = node_at<Stmt>(token);
        stmt->kind = Stmt::Kind::kText;
        stmt->text = advance().value;
        body.push_back(std::move(stmt));
      } else if (token.kind == TokenKind::kVariableBegin) {
        auto stmt = node_at<Stmt>(token);
        advance();
        stmt->kind = Stmt::Kind::kOutput;
        stmt->expr = parse_tuple(true);
        if (current().kind != TokenKind::kVariableEnd) {
          error(current(), "expected \"}}\", found " + describe(current()));
        }
        advance();
        body.push_back(std::move(stmt));
      } else if (token.kind == TokenKind::kBlockBegin) {
        advance();
        const Token& keyword = current();
        if (keyword.kind != TokenKind::kName) error(keyword, "expected a statement keyword");
        if (ends.count(keyword.value)) {
          advance();
          return keyword.value;
        }
        body.push_back(parse_statement());
      } else {
        error(token, "unexpected " + describe(token));
      }
    }
  }

  StmtPtr parse_statement() {
    const Token& keyword = current();
    const std::string word = keyword.value;
    if (word == "if") return parse_if();
    if (word == "for") return parse_for();
    if (word == "set") return parse_set();
    if (word == "macro") return parse_macro();
    if (word == "filter") return parse_filter_block();
    if (word == "generation") {
      auto stmt = node_at<Stmt>(advance());
      stmt->kind = Stmt::Kind::kGeneration;
      expect_block_end();
      parse_body(stmt->body, {"endgeneration"});
      expect_block_end();
      return stmt;
    }
    if (word == "break" || word == "continue") {
      auto stmt = node_at<Stmt>(advance());
      if (loop_depth_ == 0) error(keyword, "\"" + word + "\" outside a for loop");
      stmt->kind = word == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue;
      expect_block_end();
      return stmt;
    }
    static const std::set<std::string> kKnown = {"include", "import", "from",       "extends",
                                                 "block",   "call",   "with",       "do",
                                                 "print",   "trans",  "autoescape", "raw"};
    if (kKnown.count(word)) {
      error(keyword, "\"{% " + word + " %}\" is not supported in chat templates");
    }
    error(keyword, "unknown statement \"" + word + "\"");
  }

  StmtPtr parse_if() {
    auto stmt = node_at<Stmt>(advance());
    stmt->kind = Stmt::Kind::kIf;
    stmt->expr = parse_expression(false);
    expect_block_end();
    const std::string end = parse_body(stmt->body, {"elif", "else", "endif"});
    if (end == "elif") {
      back_up();  // re-read "elif" as the keyword of a nested if
      auto nested = parse_if();
      stmt->else_body.push_back(std::move(nested));
      return stmt;
    }
    if (end == "else") {
      expect_block_end();
      parse_body(stmt->else_body, {"endif"});
    }
    expect_block_end();
    return stmt;
  }

  std::vector<std::string> parse_target_names() {
    std::vector<std::string> names;
    const bool parenthesized = skip_operator("(");
    names.push_back(expect_name());
    while (skip_operator(",")) {
      if (current().kind != TokenKind::kName) break;
      names.push_back(expect_name());
    }
    if (parenthesized) expect_operator(")");
    return names;
  }

  StmtPtr parse_for() {
    auto stmt = node_at<Stmt>(advance());
    stmt->kind = Stmt::Kind::kFor;
    stmt->targets = parse_target_names();
    if (!skip_name("in")) error(current(), "expected \"in\" in the for statement");
    stmt->expr = parse_tuple(false);
    if (skip_name("if")) stmt->filter = parse_expression(true);
    if (is_name("recursive")) error(current(), "recursive for loops are not supported");
    expect_block_end();
    ++loop_depth_;
    const std::string end = parse_body(stmt->body, {"else", "endfor"});
    --loop_depth_;
    if (end == "else") {
      expect_block_end();
      parse_body(stmt->else_body, {"endfor"});
    }
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_set() {
    auto stmt = node_at<Stmt>(advance());
    stmt->kind = Stmt::Kind::kSet;
    if (current().kind == TokenKind::kName && peek().kind == TokenKind::kOperator &&
        peek().value == ".") {
      stmt->targets.push_back(advance().value);
      advance();
      stmt->attribute = expect_name();
    } else {
      stmt->targets = parse_target_names();
    }
    if (skip_operator("=")) {
      stmt->expr = parse_tuple(true);
      expect_block_end();
      return stmt;
    }
    if (stmt->targets.size() != 1 || !stmt->attribute.empty()) {
      error(current(), "expected \"=\" in the set statement");
    }
    stmt->kind = Stmt::Kind::kSetBlock;
    while (skip_operator("|")) stmt->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    parse_body(stmt->body, {"endset"});
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_macro() {
    auto stmt = node_at<Stmt>(advance());
    stmt->kind = Stmt::Kind::kMacro;
    stmt->name = expect_name();
    expect_operator("(");
    while (!skip_operator(")")) {
      if (!stmt->params.empty()) expect_operator(",");
      if (skip_operator(")")) break;
      std::string param = expect_name();
      ExprPtr default_value;
      if (skip_operator("=")) default_value = parse_expression(true);
      stmt->params.emplace_back(std::move(param), std::move(default_value));
    }
    expect_block_end();
    const int saved_loop_depth = loop_depth_;
    loop_depth_ = 0;
    parse_body(stmt->body, {"endmacro"});
    loop_depth_ = saved_loop_depth;
    if (current().kind == TokenKind::kName) advance();  // {% endmacro name %}
    expect_block_end();
    return stmt;
  }

  StmtPtr parse_filter_block() {
    auto stmt = node_at<Stmt>(advance());
    stmt->kind = Stmt::Kind::kFilterBlock;
    stmt->filters.push_back(parse_filter(nullptr));
    while (skip_operator("|")) stmt->filters.push_back(parse_filter(nullptr));
    expect_block_end();
    parse_body(stmt->body, {"endfilter"});
    expect_block_end();
    return stmt;
  }

  int loop_depth_ = 0;
};

}  // namespace

TemplateAst parse_template(const std::string& source) {
  return Parser(tokenize_template(source)).run();
}

}  // namespace shardtrain::chat
