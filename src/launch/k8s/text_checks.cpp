#include "launch/k8s/text_checks.h"

#include <fmt/format.h>

#include "data/tokenizer/utf8.h"

namespace shardtrain::launch::k8s {

bool is_valid_utf8(std::string_view text) { return tokenizer::is_valid_utf8(text); }

std::string quote_for_error(std::string_view text) {
  constexpr size_t kShown = 200;
  const std::string_view shown = text.substr(0, kShown);
  std::string out = "'";
  for (size_t pos = 0; pos < shown.size();) {
    const tokenizer::Utf8Unit unit = tokenizer::decode_utf8(shown, pos);
    const char32_t c = unit.code_point;
    if (c == tokenizer::kInvalidCodePoint) {
      for (size_t i = 0; i < unit.length; ++i) {
        out += fmt::format("\\x{:02x}", static_cast<unsigned char>(shown[pos + i]));
      }
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\'' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20 || c == 0x7F) {
      out += fmt::format("\\x{:02x}", static_cast<unsigned>(c));
    } else if ((c >= 0x80 && c <= 0x9F) || c == 0x2028 || c == 0x2029 || c == 0xFEFF) {
      out += fmt::format("\\u{:04x}", static_cast<unsigned>(c));
    } else {
      out.append(shown.substr(pos, unit.length));
    }
    pos += unit.length;
  }
  out += '\'';
  if (text.size() > kShown) out += "...";
  return out;
}

}  // namespace shardtrain::launch::k8s
