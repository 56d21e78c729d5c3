#include "data/token_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "core/error.h"
#include "io/atomic_file.h"

namespace shardtrain {

static_assert(std::endian::native == std::endian::little,
              "token files are little-endian and read in place");

namespace {

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t flags;
  uint64_t n_tokens;
  uint64_t reserved;  // version 1: 0; versions 2, 3: the sequence length the tokens were packed at
};
static_assert(sizeof(Header) == kTokenFileHeaderBytes);

// Magic bytes as printable text for an error message.
std::string printable(const char* bytes, size_t count) {
  std::string out;
  for (size_t i = 0; i < count; ++i) {
    const unsigned char c = static_cast<unsigned char>(bytes[i]);
    out += (c >= 0x20 && c < 0x7f) ? std::string(1, static_cast<char>(c))
                                   : fmt::format("\\x{:02x}", c);
  }
  return out;
}

// The whole file mapped read-only. Throws Error naming `path` when it cannot be opened, is not a
// regular file, or is shorter than a header.
std::pair<void*, size_t> map_token_file(const std::string& path) {
  // O_NONBLOCK: a FIFO's open would wait for a writer; it returns at once and the regular-file
  // check below refuses it (no effect on regular files).
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("token file {}: cannot open ({}); check data.path", path, std::strerror(errno));
  struct stat info {};
  const int stat_errno = ::fstat(fd, &info) != 0 ? errno : 0;
  const size_t actual = static_cast<size_t>(info.st_size);
  std::string problem;
  if (stat_errno != 0) {
    problem = fmt::format("cannot stat ({})", std::strerror(stat_errno));
  } else if (!S_ISREG(info.st_mode)) {
    problem = "not a regular file; data.path must name a token file";
  } else if (actual == 0) {
    problem = "the file is empty (no header, no tokens); regenerate it";
  } else if (actual < kTokenFileHeaderBytes) {
    problem = fmt::format(
        "{} bytes is smaller than the {}-byte header; the file is truncated or not a token file",
        actual, kTokenFileHeaderBytes);
  }
  if (!problem.empty()) {
    ::close(fd);
    fail("token file {}: {}", path, problem);
  }
  void* mapping = ::mmap(nullptr, actual, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_errno = errno;
  ::close(fd);
  if (mapping == MAP_FAILED)
    fail("token file {}: mmap failed ({})", path, std::strerror(map_errno));
  return {mapping, actual};
}

// Where the parts of a token file of `actual` bytes lie, from its header. Throws Error naming
// `path` when the header is not one this build reads or disagrees with the file size.
struct TokenFileLayout {
  bool has_mask = false, has_table = false;
  uint64_t data_end = 0;  // offset of the document table (version 3) or the file's end
};
TokenFileLayout checked_layout(const std::string& path, const Header& header, size_t actual) {
  if (std::memcmp(header.magic, kTokenFileMagic, sizeof(kTokenFileMagic)) != 0) {
    fail(
        "token file {}: not a shardtrain token file (magic \"{}\", expected \"SHTOKENS\"); "
        "convert the data with tools/ or set data.format",
        path, printable(header.magic, sizeof(header.magic)));
  }
  if (header.version != kTokenFileVersion && header.version != kTokenFileVersionPacked &&
      header.version != kTokenFileVersionDocuments) {
    fail(
        "token file {}: unsupported version {} (this build reads versions {} to {}); "
        "regenerate the file",
        path, header.version, kTokenFileVersion, kTokenFileVersionDocuments);
  }
  if ((header.flags & ~kTokenFileHasLossMask) != 0) {
    fail(
        "token file {}: unknown flags 0x{:x} in the header; the file is corrupt or from a "
        "newer writer",
        path, header.flags);
  }
  if (header.version == kTokenFileVersion && header.reserved != 0) {
    fail("token file {}: reserved header field is {} (must be 0); the file is corrupt", path,
         header.reserved);
  }
  if (header.n_tokens == 0) {
    fail("token file {}: contains no tokens; regenerate it from non-empty data", path);
  }
  TokenFileLayout layout;
  layout.has_mask = (header.flags & kTokenFileHasLossMask) != 0;
  layout.has_table = header.version == kTokenFileVersionDocuments;
  const uint64_t bytes_per_token = layout.has_mask ? 5 : 4;
  // Bounded so that the data's end plus a document table's count (8 bytes) cannot wrap around.
  constexpr uint64_t kMaxTokens = (UINT64_MAX - kTokenFileHeaderBytes - 8) / 5;
  if (header.n_tokens > kMaxTokens) {
    fail(
        "token file {}: header claims {} tokens, which cannot fit in any file; the header is "
        "corrupt",
        path, header.n_tokens);
  }
  layout.data_end = kTokenFileHeaderBytes + bytes_per_token * header.n_tokens;
  // Version 3 needs at least the table's count after the data; its exact size is checked with
  // the table.
  const uint64_t expected = layout.data_end + (layout.has_table ? 8 : 0);
  if (layout.has_table ? actual < expected : expected != actual) {
    fail(
        "token file {}: size is {} bytes but the header (n_tokens = {}, loss mask: {}{}) "
        "requires {}{} bytes; the file is {}: regenerate it",
        path, actual, header.n_tokens, layout.has_mask ? "yes" : "no",
        layout.has_table ? ", document table" : "", layout.has_table ? "at least " : "", expected,
        actual < expected ? "truncated" : "corrupt (extra bytes)");
  }
  return layout;
}

}  // namespace

TokenFile::TokenFile(const std::string& path) : path_(path) {
  std::tie(mapping_, mapping_bytes_) = map_token_file(path);
  // The destructor does not run when the constructor throws: unmap before passing it on.
  try {
    Header header;
    std::memcpy(&header, mapping_, sizeof(header));
    const TokenFileLayout layout = checked_layout(path, header, mapping_bytes_);
    n_tokens_ = header.n_tokens;
    version_ = header.version;
    packed_seq_len_ = header.version == kTokenFileVersion ? 0 : header.reserved;
    const auto* base = static_cast<const uint8_t*>(mapping_);
    tokens_ = reinterpret_cast<const uint32_t*>(base + kTokenFileHeaderBytes);
    if (layout.has_mask) loss_mask_ = base + kTokenFileHeaderBytes + 4 * n_tokens_;
    if (layout.has_table) read_document_table(layout.data_end);
  } catch (const Error&) {
    unmap();
    throw;
  }
}

void TokenFile::read_document_table(uint64_t table_offset) {
  const auto* base = static_cast<const uint8_t*>(mapping_);
  uint64_t count = 0;
  std::memcpy(&count, base + table_offset, sizeof(count));
  const uint64_t room = (mapping_bytes_ - table_offset - sizeof(count)) / sizeof(uint64_t);
  const std::string hint = "regenerate the file with shardtrain prepare";
  if (count == 0) fail("token file {}: the document table is empty; {}", path_, hint);
  if (count > n_tokens_) {
    fail("token file {}: the document table claims {} documents for {} tokens; {}", path_, count,
         n_tokens_, hint);
  }
  // count <= n_tokens_, so the product cannot overflow.
  const uint64_t expected = table_offset + sizeof(count) + count * sizeof(uint64_t);
  if (count > room || expected != mapping_bytes_) {
    fail(
        "token file {}: size is {} bytes but the header and the document table ({} documents) "
        "require {} bytes; the file is {}: {}",
        path_, mapping_bytes_, count, expected,
        mapping_bytes_ < expected ? "truncated" : "corrupt (extra bytes)", hint);
  }
  document_starts_.resize(count);
  // The table is not 8-byte aligned in the mapping (it follows 5n bytes), so it is copied.
  std::memcpy(document_starts_.data(), base + table_offset + sizeof(count),
              count * sizeof(uint64_t));
  if (document_starts_[0] != 0) {
    fail(
        "token file {}: document table entry 0 is {}; the first document must start at token 0; {}",
        path_, document_starts_[0], hint);
  }
  for (uint64_t i = 1; i < count; ++i) {
    const uint64_t start = document_starts_[i];
    if (start >= n_tokens_) {
      fail("token file {}: document table entry {} is {}, past the end of the {} tokens; {}", path_,
           i, start, n_tokens_, hint);
    }
    if (start <= document_starts_[i - 1]) {
      fail(
          "token file {}: document table entry {} is {}, not greater than entry {} ({}); the "
          "starts must increase; {}",
          path_, i, start, i - 1, document_starts_[i - 1], hint);
    }
  }
}

TokenFile::~TokenFile() { unmap(); }

TokenFile::TokenFile(TokenFile&& other) noexcept { *this = std::move(other); }

TokenFile& TokenFile::operator=(TokenFile&& other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    mapping_bytes_ = std::exchange(other.mapping_bytes_, 0);
    tokens_ = std::exchange(other.tokens_, nullptr);
    loss_mask_ = std::exchange(other.loss_mask_, nullptr);
    n_tokens_ = std::exchange(other.n_tokens_, 0);
    packed_seq_len_ = std::exchange(other.packed_seq_len_, 0);
    version_ = std::exchange(other.version_, 0);
    document_starts_ = std::exchange(other.document_starts_, {});
  }
  return *this;
}

void TokenFile::unmap() {
  if (mapping_ != nullptr) ::munmap(mapping_, mapping_bytes_);
  mapping_ = nullptr;
  mapping_bytes_ = 0;
  tokens_ = nullptr;
  loss_mask_ = nullptr;
  n_tokens_ = 0;
  packed_seq_len_ = 0;
  version_ = 0;
  document_starts_.clear();
}

void write_token_file(const std::string& path, std::span<const uint32_t> tokens,
                      std::span<const uint8_t> loss_mask, uint64_t packed_seq_len,
                      std::span<const uint64_t> document_starts) {
  SHARDTRAIN_CHECK(!tokens.empty(), "a token file needs at least one token");
  SHARDTRAIN_CHECK(loss_mask.empty() || loss_mask.size() == tokens.size(),
                   "loss mask has {} entries for {} tokens", loss_mask.size(), tokens.size());
  for (size_t i = 0; i < document_starts.size(); ++i) {
    SHARDTRAIN_CHECK(
        i == 0 ? document_starts[0] == 0
               : document_starts[i] > document_starts[i - 1] && document_starts[i] < tokens.size(),
        "document start {} is {}", i, document_starts[i]);
  }
  Header header{};
  std::memcpy(header.magic, kTokenFileMagic, sizeof(header.magic));
  header.version = !document_starts.empty() ? kTokenFileVersionDocuments
                   : packed_seq_len > 0     ? kTokenFileVersionPacked
                                            : kTokenFileVersion;
  header.flags = loss_mask.empty() ? 0 : kTokenFileHasLossMask;
  header.n_tokens = tokens.size();
  header.reserved = packed_seq_len;

  AtomicFileWriter out(path);  // temp file + fsync + rename; removed if we throw
  out.write(&header, sizeof(header));
  out.write(tokens.data(), tokens.size_bytes());
  if (!loss_mask.empty()) {
    std::vector<uint8_t> normalized(loss_mask.begin(), loss_mask.end());
    for (uint8_t& flag : normalized) flag = flag != 0 ? 1 : 0;
    out.write(normalized.data(), normalized.size());
  }
  if (!document_starts.empty()) {
    const uint64_t count = document_starts.size();
    out.write(&count, sizeof(count));
    out.write(document_starts.data(), document_starts.size_bytes());
  }
  out.commit();
}

}  // namespace shardtrain
