#include "data/tokenizer/utf8.h"

#include <utf8proc.h>

namespace shardtrain::tokenizer {
namespace {

bool is_continuation(unsigned char byte) { return (byte & 0xC0) == 0x80; }

}  // namespace

Utf8Unit decode_utf8(std::string_view text, size_t pos) {
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t remaining = text.size() - pos;
  const unsigned char lead = s[pos];
  if (lead < 0x80) return {lead, 1};

  size_t needed = 0;                      // continuation bytes after the lead
  unsigned char low = 0x80, high = 0xBF;  // allowed range of the first continuation byte
  char32_t code_point = 0;
  if (lead >= 0xC2 && lead <= 0xDF) {
    needed = 1;
    code_point = lead & 0x1F;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    needed = 2;
    code_point = lead & 0x0F;
    if (lead == 0xE0) low = 0xA0;   // no overlong encodings
    if (lead == 0xED) high = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    needed = 3;
    code_point = lead & 0x07;
    if (lead == 0xF0) low = 0x90;   // no overlong encodings
    if (lead == 0xF4) high = 0x8F;  // nothing above U+10FFFF
  } else {
    return {kInvalidCodePoint, 1};
  }
  for (size_t i = 1; i <= needed; ++i) {
    if (i >= remaining) return {kInvalidCodePoint, i};
    const unsigned char byte = s[pos + i];
    const bool in_range = i == 1 ? (byte >= low && byte <= high) : is_continuation(byte);
    if (!in_range) return {kInvalidCodePoint, i};
    code_point = (code_point << 6) | (byte & 0x3F);
  }
  return {code_point, needed + 1};
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool is_valid_utf8(std::string_view text) {
  for (size_t pos = 0; pos < text.size();) {
    const Utf8Unit unit = decode_utf8(text, pos);
    if (unit.code_point == kInvalidCodePoint) return false;
    pos += unit.length;
  }
  return true;
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t pos = 0; pos < bytes.size();) {
    const Utf8Unit unit = decode_utf8(bytes, pos);
    if (unit.code_point == kInvalidCodePoint) {
      out += "\xEF\xBF\xBD";
    } else {
      out.append(bytes.substr(pos, unit.length));
    }
    pos += unit.length;
  }
  return out;
}

bool is_unicode_whitespace(char32_t cp) {
  switch (cp) {
    case 0x09:
    case 0x0A:
    case 0x0B:
    case 0x0C:
    case 0x0D:
    case 0x20:
    case 0x85:
    case 0xA0:
    case 0x1680:
    case 0x2028:
    case 0x2029:
    case 0x202F:
    case 0x205F:
    case 0x3000:
      return true;
    default:
      return cp >= 0x2000 && cp <= 0x200A;
  }
}

bool is_word_character(char32_t cp) {
  if (cp == kInvalidCodePoint) return false;
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(cp))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_PC:
      return true;
    default:
      return false;
  }
}

}  // namespace shardtrain::tokenizer
