// Token files: the binary format for pre-tokenized training data (also docs/token-format.md).
//
// Layout (all integers little-endian):
//   offset  size  field
//   0       8     magic     "SHTOKENS" (ASCII, no terminator)
//   8       4     version   uint32, 1 or 2
//   12      4     flags     uint32; bit 0 = the file has a loss mask; other bits must be 0
//   16      8     n_tokens  uint64, >= 1
//   24      8     version 1: reserved, uint64, = 0
//                 version 2: packed_seq_len, uint64: the sequence length the writer packed
//                 the tokens at (`prepare --seq-len`, training's data.seq_len), 0 = unknown
//   32      4*n   token ids, uint32 each
//   32+4n   n     loss mask (only if flags bit 0): uint8 per token; 1 = compute the loss on this
//                 token as a target, 0 = ignore it. Writers write only 0 or 1; readers treat any
//                 nonzero byte as 1.
// Writers write version 1 unless they know a packing length; readers take both (old files
// load; their packed_seq_len is 0). The file size is exactly 32 + 4n (+ n with a mask); nothing may
// follow.
//
// TokenFile maps a file read-only (POSIX mmap) and validates the header and size: a wrong magic,
// unsupported version or flags, nonzero reserved field, zero tokens or a size that disagrees
// with the header throws shardtrain::Error naming the file (with expected vs actual size).
// The mapping lives until destruction. Movable, not copyable. REQUIRES a little-endian host.
//
// write_token_file() writes atomically: a temp file in the same directory, fsync, then rename
// over `path`, so readers never see a partial file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

namespace shardtrain {

inline constexpr char kTokenFileMagic[8] = {'S', 'H', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr uint32_t kTokenFileVersionPacked = 2;  // records packed_seq_len
inline constexpr uint32_t kTokenFileHasLossMask = 1u << 0;
inline constexpr size_t kTokenFileHeaderBytes = 32;

class TokenFile {
 public:
  explicit TokenFile(const std::string& path);
  ~TokenFile();
  TokenFile(TokenFile&& other) noexcept;
  TokenFile& operator=(TokenFile&& other) noexcept;
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  const std::string& path() const { return path_; }
  uint64_t size() const { return n_tokens_; }  // number of tokens
  std::span<const uint32_t> tokens() const { return {tokens_, n_tokens_}; }
  bool has_loss_mask() const { return loss_mask_ != nullptr; }
  // Empty when has_loss_mask() is false.
  std::span<const uint8_t> loss_mask() const { return {loss_mask_, loss_mask_ ? n_tokens_ : 0}; }
  // The sequence length the tokens were packed at; 0 = not recorded (version 1 files).
  uint64_t packed_seq_len() const { return packed_seq_len_; }

 private:
  void unmap();

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint32_t* tokens_ = nullptr;
  const uint8_t* loss_mask_ = nullptr;
  uint64_t n_tokens_ = 0;
  uint64_t packed_seq_len_ = 0;
};

// Writes `tokens` (and `loss_mask` if non-empty) to `path` atomically; packed_seq_len > 0 writes
// a version 2 file that records it.
// REQUIRES: tokens non-empty; loss_mask empty or the same length as tokens. Throws Error naming
// the path on I/O failure.
void write_token_file(const std::string& path, std::span<const uint32_t> tokens,
                      std::span<const uint8_t> loss_mask = {}, uint64_t packed_seq_len = 0);

}  // namespace shardtrain
