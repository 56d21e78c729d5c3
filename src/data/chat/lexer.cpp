#include "data/chat/lexer.h"

#include <algorithm>
#include <cstring>

#include "core/error.h"
#include "data/chat/value.h"
#include "data/tokenizer/utf8.h"

namespace shardtrain::chat {
namespace {

std::string normalize_newlines(const std::string& source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();  // keep_trailing_newline = False
  return out;
}

// Length in bytes of the Python whitespace character at text[pos], 0 if there is none.
size_t space_length(const std::string& text, size_t pos) {
  const tokenizer::Utf8Unit unit = tokenizer::decode_utf8(text, pos);
  if (unit.code_point == tokenizer::kInvalidCodePoint) return 0;
  return is_python_space(unit.code_point) ? unit.length : 0;
}

std::string rstrip_python(const std::string& text) {
  const std::u32string points = to_code_points(text);
  size_t end = points.size();
  while (end > 0 && is_python_space(points[end - 1])) --end;
  return from_code_points(points.substr(0, end));
}

bool all_python_space(const std::string& text) {
  for (char32_t cp : to_code_points(text)) {
    if (!is_python_space(cp)) return false;
  }
  return true;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    while (pos_ < src_.size()) {
      const size_t tag = find_tag(pos_);
      if (tag == std::string::npos) {
        emit(TokenKind::kData, src_.substr(pos_), pos_);
        break;
      }
      lex_tag(tag);
    }
    emit(TokenKind::kEnd, "", src_.size());
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error_at(size_t offset, const std::string& message) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    const size_t column = offset - line_starts_[line - 1] + 1;
    fail("line {}, column {}: {}", line, column, message);
  }

  void emit(TokenKind kind, std::string value, size_t offset) {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const size_t line = static_cast<size_t>(it - line_starts_.begin());
    Token token;
    token.kind = kind;
    token.value = std::move(value);
    token.line = static_cast<int>(line);
    token.column = static_cast<int>(offset - line_starts_[line - 1] + 1);
    tokens_.push_back(std::move(token));
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) {
        return i;
      }
    }
    return std::string::npos;
  }

  // Emits the text before a tag at `tag`, applying "-" and lstrip_blocks.
  void emit_text_before(size_t tag, char kind, char sign) {
    std::string text = src_.substr(pos_, tag - pos_);
    if (sign == '-') {
      text = rstrip_python(text);
    } else if (sign != '+' && kind != '{') {
      const size_t newline = text.rfind('\n');
      const size_t l_pos = newline == std::string::npos ? 0 : newline + 1;
      if ((l_pos > 0 || line_starting_) && l_pos < text.size() &&
          all_python_space(text.substr(l_pos))) {
        text.resize(l_pos);
      }
    }
    if (!text.empty()) emit(TokenKind::kData, std::move(text), pos_);
  }

  // After a tag's end: "-" strips all whitespace, trim_blocks one newline (statements, comments).
  void after_tag_end(char sign, bool trim_newline) {
    if (sign == '-') {
      while (pos_ < src_.size()) {
        const size_t n = space_length(src_, pos_);
        if (n == 0) break;
        pos_ += n;
      }
    } else if (sign != '+' && trim_newline && pos_ < src_.size() && src_[pos_] == '\n') {
      ++pos_;
    }
    line_starting_ = pos_ > 0 && src_[pos_ - 1] == '\n';
  }

  void lex_tag(size_t tag) {
    const char kind = src_[tag + 1];
    const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+')
                          ? src_[tag + 2]
                          : '\0';
    emit_text_before(tag, kind, sign);
    pos_ = tag + 2 + (sign ? 1 : 0);
    if (kind == '#') {
      lex_comment(tag);
    } else if (kind == '{') {
      emit(TokenKind::kVariableBegin, "{{", tag);
      lex_inside(tag, "}}", TokenKind::kVariableEnd, false);
    } else if (is_raw_start()) {
      lex_raw(tag);
    } else {
      emit(TokenKind::kBlockBegin, "{%", tag);
      lex_inside(tag, "%}", TokenKind::kBlockEnd, true);
    }
  }

  void lex_comment(size_t tag) {
    const size_t close = src_.find("#}", pos_);
    if (close == std::string::npos) error_at(tag, "unterminated comment: \"{#\" has no \"#}\"");
    const char end_sign =
        close > pos_ && (src_[close - 1] == '-' || src_[close - 1] == '+') ? src_[close - 1] : '\0';
    pos_ = close + 2;
    after_tag_end(end_sign, true);
  }

  bool is_raw_start() const {
    size_t p = pos_;
    while (p < src_.size() && space_length(src_, p) > 0) p += space_length(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    while (p < src_.size() && space_length(src_, p) > 0) p += space_length(src_, p);
    if (p < src_.size() && src_[p] == '-') ++p;
    return src_.compare(p, 2, "%}") == 0;
  }

  void lex_raw(size_t tag) {
    size_t close = src_.find("%}", pos_);
    const char begin_end_sign = src_[close - 1] == '-' ? '-' : '\0';
    pos_ = close + 2;
    after_tag_end(begin_end_sign, true);
    // Find "{%[-+]? endraw [-]?%}".
    size_t search = pos_;
    while (true) {
      const size_t start = src_.find("{%", search);
      if (start == std::string::npos) error_at(tag, "unterminated {% raw %}: no {% endraw %}");
      size_t p = start + 2;
      const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : '\0';
      if (sign) ++p;
      while (p < src_.size() && space_length(src_, p) > 0) p += space_length(src_, p);
      if (src_.compare(p, 6, "endraw") != 0) {
        search = start + 2;
        continue;
      }
      p += 6;
      while (p < src_.size() && space_length(src_, p) > 0) p += space_length(src_, p);
      char end_sign = '\0';
      if (p < src_.size() && src_[p] == '-') {
        end_sign = '-';
        ++p;
      }
      if (src_.compare(p, 2, "%}") != 0) error_at(start, "expected \"%}\" after endraw");
      emit_text_before(start, '%', sign);
      pos_ = p + 2;
      after_tag_end(end_sign, true);
      return;
    }
  }

  // Tokens inside {{ }} or {% %} up to the closing delimiter.
  void lex_inside(size_t tag, const char* close, TokenKind end_kind, bool trim_newline) {
    int depth = 0;
    while (true) {
      while (pos_ < src_.size() && space_length(src_, pos_) > 0) pos_ += space_length(src_, pos_);
      if (pos_ >= src_.size()) {
        error_at(tag,
                 fmt::format("unterminated tag: no \"{}\" before the end of the template", close));
      }
      if (depth == 0) {
        char sign = '\0';
        size_t p = pos_;
        if (src_[p] == '-' || src_[p] == '+') {
          sign = src_[p];
          ++p;
        }
        if (src_.compare(p, 2, close) == 0) {
          emit(end_kind, close, pos_);
          pos_ = p + 2;
          after_tag_end(sign, trim_newline);
          return;
        }
      }
      lex_one(depth);
    }
  }

  void lex_one(int& depth) {
    const size_t start = pos_;
    const char c = src_[pos_];
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      while (pos_ < src_.size() &&
             (std::isalnum(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        ++pos_;
      }
      emit(TokenKind::kName, src_.substr(start, pos_ - start), start);
      return;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      lex_number();
      return;
    }
    if (c == '\'' || c == '"') {
      lex_string();
      return;
    }
    static const char* const kTwo[] = {"**", "//", "==", "!=", "<=", ">="};
    for (const char* op : kTwo) {
      if (src_.compare(pos_, 2, op) == 0) {
        emit(TokenKind::kOperator, op, start);
        pos_ += 2;
        return;
      }
    }
    if (std::strchr("+-*/%~<>=()[]{},.:|;", c) != nullptr) {
      if (c == '(' || c == '[' || c == '{') ++depth;
      if (c == ')' || c == ']' || c == '}') --depth;
      emit(TokenKind::kOperator, std::string(1, c), start);
      ++pos_;
      return;
    }
    error_at(start, fmt::format("unexpected character '{}' in a tag", c));
  }

  void lex_number() {
    const size_t start = pos_;
    std::string digits;
    auto take_digits = [&] {
      while (pos_ < src_.size() &&
             (std::isdigit(static_cast<unsigned char>(src_[pos_])) || src_[pos_] == '_')) {
        if (src_[pos_] != '_') digits += src_[pos_];
        ++pos_;
      }
    };
    take_digits();
    bool is_float = false;
    if (pos_ + 1 < src_.size() && src_[pos_] == '.' &&
        std::isdigit(static_cast<unsigned char>(src_[pos_ + 1]))) {
      is_float = true;
      digits += '.';
      ++pos_;
      take_digits();
    }
    if (pos_ < src_.size() && (src_[pos_] == 'e' || src_[pos_] == 'E')) {
      size_t p = pos_ + 1;
      if (p < src_.size() && (src_[p] == '+' || src_[p] == '-')) ++p;
      if (p < src_.size() && std::isdigit(static_cast<unsigned char>(src_[p]))) {
        is_float = true;
        digits += src_.substr(pos_, p - pos_);
        pos_ = p;
        take_digits();
      }
    }
    emit(is_float ? TokenKind::kFloat : TokenKind::kInteger, digits, start);
  }

  void lex_string() {
    const size_t start = pos_;
    const char quote = src_[pos_++];
    std::string out;
    while (true) {
      if (pos_ >= src_.size()) error_at(start, "unterminated string literal");
      const char c = src_[pos_];
      if (c == quote) {
        ++pos_;
        break;
      }
      if (c != '\\') {
        out += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= src_.size()) error_at(start, "unterminated string literal");
      pos_ += 2;
      decode_escape(src_[pos_ - 1], start, out);
    }
    emit(TokenKind::kString, std::move(out), start);
  }

  // Python's unicode-escape for the character after a backslash (pos_ is past it).
  void decode_escape(char e, size_t start, std::string& out) {
    switch (e) {
      case '\n':
        return;
      case '\\':
      case '\'':
      case '"':
        out += e;
        return;
      case 'a':
        out += '\a';
        return;
      case 'b':
        out += '\b';
        return;
      case 'f':
        out += '\f';
        return;
      case 'n':
        out += '\n';
        return;
      case 'r':
        out += '\r';
        return;
      case 't':
        out += '\t';
        return;
      case 'v':
        out += '\v';
        return;
      case 'x':
        out_code_point(hex_digits(2, start), out);
        return;
      case 'u':
        out_code_point(hex_digits(4, start), out);
        return;
      case 'U':
        out_code_point(hex_digits(8, start), out);
        return;
      default:
        break;
    }
    if (e >= '0' && e <= '7') {
      uint32_t value = static_cast<uint32_t>(e - '0');
      for (int i = 0; i < 2 && pos_ < src_.size() && src_[pos_] >= '0' && src_[pos_] <= '7'; ++i) {
        value = value * 8 + static_cast<uint32_t>(src_[pos_++] - '0');
      }
      out_code_point(value, out);
      return;
    }
    out += '\\';  // unknown escapes stay as written, like Python
    out += e;
  }

  uint32_t hex_digits(int count, size_t start) {
    uint32_t value = 0;
    for (int i = 0; i < count; ++i) {
      if (pos_ >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[pos_]))) {
        error_at(start, "truncated \\x, \\u or \\U escape in a string literal");
      }
      const char h = static_cast<char>(std::tolower(static_cast<unsigned char>(src_[pos_++])));
      value = value * 16 + static_cast<uint32_t>(h <= '9' ? h - '0' : h - 'a' + 10);
    }
    return value;
  }

  void out_code_point(uint32_t value, std::string& out) const {
    if (value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF)) value = 0xFFFD;
    tokenizer::append_utf8(out, static_cast<char32_t>(value));
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
  bool line_starting_ = true;
};

}  // namespace

std::vector<Token> tokenize_template(const std::string& source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace shardtrain::chat
