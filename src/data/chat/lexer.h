// Lexer for chat templates: template source -> tokens, with Jinja2's whitespace rules as
// transformers configures them (trim_blocks = lstrip_blocks = True, keep_trailing_newline =
// False).
//
//   - "\r\n" and "\r" become "\n" everywhere; one trailing newline of the source is dropped.
//   - {{ }} output, {% %} statements, {# #} comments (dropped, whitespace rules apply as to
//     statements), {% raw %}...{% endraw %} verbatim text.
//   - "{%-", "{{-", "{#-" strip all whitespace before the tag; "-%}", "-}}", "-#}" strip all
//     whitespace after it. "{%+" / "{#+" keep the whitespace lstrip_blocks would remove.
//   - trim_blocks: the first newline after "%}" or "#}" is removed.
//   - lstrip_blocks: spaces and tabs between a line start and "{%" / "{#" are removed.
//   - Inside tags: names, integers, floats, strings ('..' or "..", Python escapes), operators.
//     A "}}" or "%}" inside open brackets belongs to the expression (as in Jinja2).
// Throws Error "line L, column C: ..." for an unterminated tag, comment or string, or an
// unexpected character. Line and column count from 1 (columns in bytes).
#pragma once

#include <string>
#include <vector>

namespace shardtrain::chat {

enum class TokenKind {
  kData,           // text outside tags (value = the text)
  kVariableBegin,  // {{
  kVariableEnd,    // }}
  kBlockBegin,     // {%
  kBlockEnd,       // %}
  kName,
  kString,   // value = the decoded string
  kInteger,  // value = digits (underscores removed)
  kFloat,
  kOperator,  // value = the operator, e.g. "==", "(", "|"
  kEnd,
};

struct Token {
  TokenKind kind = TokenKind::kEnd;
  std::string value;
  int line = 1;
  int column = 1;
};

std::vector<Token> tokenize_template(const std::string& source);

}  // namespace shardtrain::chat
