#include "core/toml_nesting.h"

#include <fmt/format.h>

#include <vector>

namespace shardtrain {
namespace {

// What the next characters are, in TOML's grammar.
enum class Mode {
  kKey,     // a key (at a line start, or after '{' / ',' inside an inline table)
  kHeader,  // a table header's key path: [a.b] or [[a.b]]
  kValue,   // a value (after '='), or the rest of a header line
};

class Scanner {
 public:
  Scanner(std::string_view text, int max_depth) : text_(text), max_depth_(max_depth) {}

  std::optional<std::string> run() {
    for (pos_ = 0; pos_ < text_.size(); ++pos_) {
      const char c = text_[pos_];
      if (c == '"' || c == '\'') {
        skip_string(c);
      } else if (c == '#') {
        while (pos_ + 1 < text_.size() && text_[pos_ + 1] != '\n') ++pos_;
      } else if (c == '\n') {
        if (open_.empty()) start_key(header_parts_);
      } else if (!step(c)) {
        return problem_;
      }
    }
    return std::nullopt;
  }

 private:
  void start_key(int base) {
    mode_ = Mode::kKey;
    key_started_ = false;
    key_parts_ = 1;
    base_ = base;
  }

  // One structural character; false when it takes the nesting past the limit.
  bool step(char c) {
    const bool blank = c == ' ' || c == '\t' || c == '\r';
    switch (mode_) {
      case Mode::kKey:
        if (c == '[' && !key_started_ && open_.empty()) {
          mode_ = Mode::kHeader;
          header_parts_ = 1;
          return within(header_parts_);
        }
        if (!blank) key_started_ = true;
        if (c == '.') return within(base_ + ++key_parts_);
        if (c == '=') {
          mode_ = Mode::kValue;
          value_base_ = base_ + key_parts_;
        } else if (c == '}') {
          close();  // an empty inline table: {}
        }
        return true;
      case Mode::kHeader:
        if (c == '.') return within(++header_parts_);
        if (c == ']') mode_ = Mode::kValue;  // the rest of the line: "]" of [[...]], comment
        return true;
      case Mode::kValue:
        if (c == '[' || c == '{') {
          open_.push_back({c, base_, value_base_});
          if (!within(static_cast<int>(open_.size()))) return false;
          if (c == '{') {
            start_key(value_base_);
            return within(base_ + 1);
          }
        } else if (c == ']' || c == '}') {
          close();
        } else if (c == ',' && !open_.empty() && open_.back().bracket == '{') {
          start_key(open_.back().value_base);
        }
        return true;
    }
    return true;
  }

  void close() {
    if (open_.empty()) return;
    base_ = open_.back().base;
    open_.pop_back();
    mode_ = Mode::kValue;
  }

  bool within(int depth) {
    if (depth <= max_depth_) return true;
    int line = 1;
    size_t line_start = 0;
    for (size_t i = 0; i < pos_; ++i) {
      if (text_[i] == '\n') {
        ++line;
        line_start = i + 1;
      }
    }
    problem_ = fmt::format(
        "line {}, column {}: tables, keys or arrays nested deeper than {} levels; flatten the "
        "dotted keys, table headers or arrays",
        line, pos_ - line_start + 1, max_depth_);
    return false;
  }

  bool triple(char quote) const {
    return pos_ + 2 < text_.size() && text_[pos_ + 1] == quote && text_[pos_ + 2] == quote &&
           text_[pos_] == quote;
  }

  // Moves pos_ onto the closing quote of the string opening at pos_ (or the end of the text).
  void skip_string(char quote) {
    if (mode_ == Mode::kKey) key_started_ = true;
    const bool multi_line = triple(quote);
    const bool escapes = quote == '"';
    pos_ += multi_line ? 3 : 1;
    for (; pos_ < text_.size(); ++pos_) {
      const char c = text_[pos_];
      if (escapes && c == '\\') {
        ++pos_;
      } else if (c == quote && (!multi_line || triple(quote))) {
        // A multi-line string may end in up to two more quotes ("""a"""""): they belong to it.
        if (multi_line) {
          pos_ += 2;
          while (pos_ + 1 < text_.size() && text_[pos_ + 1] == quote) ++pos_;
        }
        return;
      } else if (c == '\n' && !multi_line) {
        --pos_;  // an unterminated string: toml++ reports it; let the newline end the key
        return;
      }
    }
  }

  struct Open {
    char bracket;    // '[' or '{'
    int base;        // the key depth outside it
    int value_base;  // the key depth of the value holding it
  };

  std::string_view text_;
  int max_depth_;
  size_t pos_ = 0;
  Mode mode_ = Mode::kKey;
  bool key_started_ = false;
  int key_parts_ = 1;
  int header_parts_ = 0;
  int base_ = 0;        // depth of the table the current key is in
  int value_base_ = 0;  // depth of the key whose value is being read
  std::vector<Open> open_;
  std::string problem_;
};

}  // namespace

std::optional<std::string> toml_nesting_problem(std::string_view text, int max_depth) {
  return Scanner(text, max_depth).run();
}

}  // namespace shardtrain
