// UTF-8 helpers for the tokenizer: walking text one character at a time without ever failing on
// invalid input, and turning arbitrary bytes back into valid UTF-8.
//
// Invalid input contract (the whole tokenizer follows it): a byte sequence that is not valid
// UTF-8 is walked as "units" of its maximal subparts (Unicode's recommended practice, the same
// units Rust's String::from_utf8_lossy replaces). Such a unit is never a letter, digit or space;
// encoders treat its bytes as they are (byte-level BPE maps them like any byte, byte-fallback BPE
// emits <0xXX> tokens). Nothing here throws or reads out of bounds.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace shardtrain::tokenizer {

// The code point that does not exist; returned for an invalid unit.
inline constexpr char32_t kInvalidCodePoint = 0xFFFFFFFF;

struct Utf8Unit {
  char32_t code_point;  // kInvalidCodePoint when the unit is not valid UTF-8
  size_t length;        // bytes consumed, >= 1
};

// Decodes the unit that starts at text[pos].
// REQUIRES: pos < text.size().
Utf8Unit decode_utf8(std::string_view text, size_t pos);

// Appends the UTF-8 encoding of `code_point` (a Unicode scalar value).
void append_utf8(std::string& out, char32_t code_point);

bool is_valid_utf8(std::string_view text);

// Returns `bytes` with every invalid unit replaced by U+FFFD (like Rust's from_utf8_lossy,
// which the Hugging Face decoders use).
std::string utf8_lossy(std::string_view bytes);

// Unicode White_Space property (Rust's char::is_whitespace).
bool is_unicode_whitespace(char32_t code_point);

// A "word" character for added tokens with single_word: letters, marks, digits and connector
// punctuation (Rust regex's \w).
bool is_word_character(char32_t code_point);

}  // namespace shardtrain::tokenizer
