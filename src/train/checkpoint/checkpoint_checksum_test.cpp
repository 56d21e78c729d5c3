// Checkpoint checksums after the move to libxxhash: the values below were produced by the
// hand-written XXH64 that earlier builds used to write manifests, on a fixed pseudo-random
// buffer at lengths that cover every code path (empty, < 32 bytes, one stripe, stripes + 8/4/1
// byte tails, 1 MiB) and two seeds. Equal values mean every checkpoint already on disk still
// verifies; file_xxhash64 must agree with the in-memory hash of the same bytes.
#include "train/checkpoint/checkpoint_checksum.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

std::vector<unsigned char> fixed_bytes() {
  std::vector<unsigned char> bytes(1048576 + 13);
  uint64_t state = 0x243F6A8885A308D3ULL;  // a 64-bit LCG: the same bytes on every machine
  for (unsigned char& b : bytes) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    b = static_cast<unsigned char>(state >> 56);
  }
  return bytes;
}

struct Expected {
  size_t bytes;
  uint64_t seed;
  uint64_t xxh64;
};

TEST(CheckpointChecksumTest, EqualsTheValuesOfTheEarlierHandWrittenXxh64) {
  const Expected expected[] = {
      {0, 0x0000000000000000ULL, 0xEF46DB3751D8E999ULL},
      {0, 0x9E3779B97F4A7C15ULL, 0xC4349FC93C010000ULL},
      {31, 0x0000000000000000ULL, 0xFA3D2DC9C4D0E713ULL},
      {31, 0x9E3779B97F4A7C15ULL, 0x8E893DBC69614E78ULL},
      {32, 0x0000000000000000ULL, 0x81E5F5A26AEF3225ULL},
      {32, 0x9E3779B97F4A7C15ULL, 0x0BA5E0AEC4DD9B80ULL},
      {100, 0x0000000000000000ULL, 0xE569E218376F833CULL},
      {100, 0x9E3779B97F4A7C15ULL, 0x87FC487096E655DDULL},
      {4103, 0x0000000000000000ULL, 0xC8647DA2575B913FULL},
      {4103, 0x9E3779B97F4A7C15ULL, 0x0DA0095C85CC1FB3ULL},
      {1048589, 0x0000000000000000ULL, 0x32A10C4780D0B407ULL},
      {1048589, 0x9E3779B97F4A7C15ULL, 0x269DB207CCD9442BULL},
  };
  const std::vector<unsigned char> bytes = fixed_bytes();
  for (const Expected& e : expected) {
    EXPECT_EQ(xxhash64(bytes.data(), e.bytes, e.seed), e.xxh64)
        << e.bytes << " bytes, seed " << e.seed;
  }
}

TEST(CheckpointChecksumTest, FileDigestIsTheHashOfTheFileBytes) {
  const std::vector<unsigned char> bytes = fixed_bytes();
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("shardtrain_checksum_" + std::to_string(::getpid())))
                               .string();
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()),
              static_cast<std::streamsize>(bytes.size()));
  }
  const FileDigest digest = file_xxhash64(path);
  std::filesystem::remove(path);
  EXPECT_EQ(digest.bytes, bytes.size());
  EXPECT_EQ(digest.xxh64, 0x32A10C4780D0B407ULL);
  EXPECT_NE(testing::error_of([&] { file_xxhash64(path); }).find(path), std::string::npos);
}

}  // namespace
}  // namespace shardtrain
