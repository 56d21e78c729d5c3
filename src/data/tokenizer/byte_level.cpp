#include "data/tokenizer/byte_level.h"

#include <array>

#include "data/tokenizer/utf8.h"

namespace shardtrain::tokenizer {
namespace {

bool stands_for_itself(int byte) {
  return (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) ||
         (byte >= 0xAE && byte <= 0xFF);
}

struct ByteLevelTables {
  std::array<char32_t, 256> code_point{};
  // UTF-8 spelling of each byte's character: at most 2 bytes (all code points are < U+0144).
  std::array<std::array<char, 2>, 256> spelling{};
  std::array<uint8_t, 256> spelling_length{};
  // Inverse map, indexed by code point; -1 where no byte maps to it.
  std::array<int16_t, 256 + 68> byte_of{};

  ByteLevelTables() {
    byte_of.fill(-1);
    char32_t next_extra = 256;
    for (int byte = 0; byte < 256; ++byte) {
      code_point[byte] = stands_for_itself(byte) ? static_cast<char32_t>(byte) : next_extra++;
      std::string encoded;
      append_utf8(encoded, code_point[byte]);
      spelling_length[byte] = static_cast<uint8_t>(encoded.size());
      byte_of[code_point[byte]] = static_cast<int16_t>(byte);
      for (size_t i = 0; i < encoded.size(); ++i) spelling[byte][i] = encoded[i];
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables instance;
  return instance;
}

}  // namespace

char32_t byte_to_unicode(uint8_t byte) { return tables().code_point[byte]; }

int unicode_to_byte(char32_t cp) {
  const auto& byte_of = tables().byte_of;
  return cp < byte_of.size() ? byte_of[cp] : -1;
}

void append_byte_level(std::string_view bytes, std::string& out) {
  const ByteLevelTables& t = tables();
  for (char c : bytes) {
    const auto byte = static_cast<uint8_t>(c);
    out.append(t.spelling[byte].data(), t.spelling_length[byte]);
  }
}

}  // namespace shardtrain::tokenizer
