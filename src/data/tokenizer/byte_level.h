// The byte-to-unicode map of GPT-2 byte-level BPE.
//
// Byte-level vocabularies spell every byte as one printable character: the bytes '!'..'~',
// 0xA1..0xAC and 0xAE..0xFF stand for themselves (as code points), and the remaining 68 bytes
// (controls, space, 0x7F..0xA0, 0xAD) map, in increasing byte order, to U+0100, U+0101, ...
// So ' ' (0x20) is U+0120 'Ġ' and '\n' is U+010A 'Ċ'.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace shardtrain::tokenizer {

// The character that stands for `byte`.
char32_t byte_to_unicode(uint8_t byte);

// The byte a character stands for, or -1 when the character is not in the map.
int unicode_to_byte(char32_t code_point);

// Appends the byte-level spelling of every byte of `bytes` (valid UTF-8 or not) to `out`.
void append_byte_level(std::string_view bytes, std::string& out);

}  // namespace shardtrain::tokenizer
