#include "train/checkpoint/checkpoint_checksum.h"

#include <fmt/format.h>
#include <xxhash.h>

#include "io/mapped_file.h"

namespace shardtrain {

uint64_t xxhash64(const void* data, size_t bytes, uint64_t seed) {
  return XXH64(data, bytes, seed);
}

FileDigest file_xxhash64(const std::string& path) {
  const MappedFile file = MappedFile::open(path);
  return {file.size(), xxhash64(file.data(), file.size())};
}

std::string xxhash64_hex(uint64_t value) { return fmt::format("{:016x}", value); }

bool parse_xxhash64_hex(const std::string& text, uint64_t* value) {
  if (text.size() != 16) return false;
  uint64_t v = 0;
  for (const char c : text) {
    int digit;
    if (c >= '0' && c <= '9')
      digit = c - '0';
    else if (c >= 'a' && c <= 'f')
      digit = c - 'a' + 10;
    else
      return false;
    v = (v << 4) | static_cast<uint64_t>(digit);
  }
  *value = v;
  return true;
}

}  // namespace shardtrain
