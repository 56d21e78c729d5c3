// TokenCursor: the parser's position in a chat template's tokens (data/chat/lexer.h) and the
// checks every grammar rule shares: peeking, consuming, expecting, one-line errors
// ("line L, column C: ...") and the nesting guard that bounds recursion (kMaxNesting).
// The expression and statement parsers (data/chat/expression_parser.h, data/chat/parser.cpp)
// derive from it. REQUIRES: the token list ends with a kEnd token (as the lexer makes it).
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "data/chat/lexer.h"
#include "data/chat/parser.h"

namespace shardtrain::chat {

class TokenCursor {
 public:
  explicit TokenCursor(std::vector<Token> tokens) : tokens_(std::move(tokens)) {}

 protected:
  const Token& current() const { return tokens_[pos_]; }
  const Token& peek(size_t ahead = 1) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& advance() {
    const Token& token = tokens_[pos_];
    if (pos_ + 1 < tokens_.size()) ++pos_;
    return token;
  }
  bool is_operator(const char* op) const {
    return current().kind == TokenKind::kOperator && current().value == op;
  }
  bool is_name(const char* name) const {
    return current().kind == TokenKind::kName && current().value == name;
  }
  bool skip_operator(const char* op) {
    if (!is_operator(op)) return false;
    advance();
    return true;
  }
  bool skip_name(const char* name) {
    if (!is_name(name)) return false;
    advance();
    return true;
  }

  [[noreturn]] void error(const Token& at, const std::string& message) const {
    fail("line {}, column {}: {}", at.line, at.column, message);
  }

  static std::string describe(const Token& token) {
    switch (token.kind) {
      case TokenKind::kEnd:
        return "the end of the template";
      case TokenKind::kBlockEnd:
        return "\"%}\"";
      case TokenKind::kVariableEnd:
        return "\"}}\"";
      case TokenKind::kData:
        return "text";
      default:
        return "\"" + token.value + "\"";
    }
  }

  void expect_operator(const char* op) {
    if (!skip_operator(op)) {
      error(current(), fmt::format("expected \"{}\", found {}", op, describe(current())));
    }
  }
  std::string expect_name() {
    if (current().kind != TokenKind::kName) {
      error(current(), "expected a name, found " + describe(current()));
    }
    return advance().value;
  }
  void expect_block_end() {
    if (current().kind != TokenKind::kBlockEnd) {
      error(current(), "expected the end of the statement (\"%}\"), found " + describe(current()));
    }
    advance();
  }

  struct DepthGuard {
    explicit DepthGuard(TokenCursor& p) : parser(p) {
      if (++parser.depth_ > kMaxNesting) {
        parser.error(parser.current(),
                     fmt::format("template nested deeper than {} levels", kMaxNesting));
      }
    }
    ~DepthGuard() { --parser.depth_; }
    TokenCursor& parser;
  };

  template <typename T>
  std::unique_ptr<T> node_at(const Token& at) {
    auto node = std::make_unique<T>();
    node->line = at.line;
    node->column = at.column;
    return node;
  }

  // Steps back one token (re-reads a keyword as the start of a nested statement).
  void back_up() { --pos_; }

 private:
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  int depth_ = 0;
};

}  // namespace shardtrain::chat
