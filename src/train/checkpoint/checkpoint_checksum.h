// Checksums of checkpoint files: XXH64 (xxHash, 64-bit) from libxxhash (Debian libxxhash-dev),
// the reference implementation, so manifests written by earlier builds (which carried their own
// copy of the algorithm) still verify. Fast enough (several GB/s) to hash a rank's shard file
// right after writing it and again before loading it.
//
// Guarantees: xxhash64(data, n, seed) equals the reference XXH64 for every input (tests check
// published vectors); file_xxhash64 hashes the whole file through a memory map and throws Error
// naming the path when it cannot be read.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace shardtrain {

uint64_t xxhash64(const void* data, size_t bytes, uint64_t seed = 0);

// The checksum of the file at `path` and its size in bytes.
struct FileDigest {
  uint64_t bytes = 0;
  uint64_t xxh64 = 0;
};
FileDigest file_xxhash64(const std::string& path);

// 16 lowercase hex digits, and back (nullopt-free: returns false on malformed text).
std::string xxhash64_hex(uint64_t value);
bool parse_xxhash64_hex(const std::string& text, uint64_t* value);

}  // namespace shardtrain
