// Token files: the binary format for pre-tokenized training data (also docs/token-format.md).
//
// Layout (all integers little-endian):
//   offset  size  field
//   0       8     magic     "SHTOKENS" (ASCII, no terminator)
//   8       4     version   uint32, 1, 2 or 3
//   12      4     flags     uint32; bit 0 = the file has a loss mask; other bits must be 0
//   16      8     n_tokens  uint64, >= 1
//   24      8     version 1: reserved, uint64, = 0
//                 versions 2 and 3: packed_seq_len, uint64: the sequence length the writer
//                 packed the tokens at (`prepare --seq-len`, training's data.seq_len), 0 = unknown
//   32      4*n   token ids, uint32 each
//   32+4n   n     loss mask (only if flags bit 0): uint8 per token; 1 = compute the loss on this
//                 token as a target, 0 = ignore it. Writers write only 0 or 1; readers treat any
//                 nonzero byte as 1.
//   then, version 3 only, the document table (at byte M = 32 + 4n, + n with a mask):
//   M       8     n_documents  uint64, >= 1
//   M+8     8*d   document starts, uint64 each: the token index where each document begins;
//                 the first is 0, each is greater than the one before and less than n_tokens.
//                 A document runs to the next start (padding after it belongs to it).
// Writers write version 3 when they know the documents, else 2 when they know a packing length,
// else 1; readers take all three (files without a table have no known documents). The file size
// is exactly what the header and the table say; nothing may follow.
//
// TokenFile maps a file read-only (POSIX mmap) and validates the header and size: a wrong magic,
// unsupported version or flags, nonzero reserved field, zero tokens, a size that disagrees
// with the header, or a document table that is inconsistent with the tokens (a start past the
// end, not increasing, not starting at 0) throws shardtrain::Error naming the file (with expected
// vs actual size, or the table entry).
// The mapping lives until destruction. Movable, not copyable. REQUIRES a little-endian host.
//
// write_token_file() writes atomically: a temp file in the same directory, fsync, then rename
// over `path`, so readers never see a partial file.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace shardtrain {

inline constexpr char kTokenFileMagic[8] = {'S', 'H', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kTokenFileVersion = 1;
inline constexpr uint32_t kTokenFileVersionPacked = 2;     // records packed_seq_len
inline constexpr uint32_t kTokenFileVersionDocuments = 3;  // also records document starts
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
  uint32_t version() const { return version_; }
  // Version 3: the token index where each document begins (validated: 0 first, increasing,
  // < size()). Empty for older files, which record no documents.
  bool has_documents() const { return !document_starts_.empty(); }
  std::span<const uint64_t> document_starts() const { return document_starts_; }

 private:
  void unmap();
  // Reads and validates the version 3 table that begins at byte `table_offset`; throws Error
  // naming the file (the caller unmaps) when it disagrees with the file size or the tokens.
  void read_document_table(uint64_t table_offset);

  std::string path_;
  void* mapping_ = nullptr;
  size_t mapping_bytes_ = 0;
  const uint32_t* tokens_ = nullptr;
  const uint8_t* loss_mask_ = nullptr;
  uint64_t n_tokens_ = 0;
  uint64_t packed_seq_len_ = 0;
  uint32_t version_ = 0;
  std::vector<uint64_t> document_starts_;
};

// Writes `tokens` (and `loss_mask` if non-empty) to `path` atomically: a version 3 file when
// document_starts is non-empty, else version 2 when packed_seq_len > 0, else version 1.
// REQUIRES: tokens non-empty; loss_mask empty or the same length as tokens; document_starts
// empty or 0 first, increasing, < tokens.size(). Throws Error naming the path on I/O failure.
void write_token_file(const std::string& path, std::span<const uint32_t> tokens,
                      std::span<const uint8_t> loss_mask = {}, uint64_t packed_seq_len = 0,
                      std::span<const uint64_t> document_starts = {});

}  // namespace shardtrain
