// Token files that record their documents (version 3, data/token_file.h): the documented bytes,
// every inconsistent document table (one line naming the file), and how each data.packing mode
// reads the windows of such a file and of an older one (data/dataset.h).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "data/token_file.h"

namespace shardtrain {
namespace {

using testing::error_of;

std::string u64(uint64_t value) { return std::string(reinterpret_cast<const char*>(&value), 8); }

class TokenFileDocumentsTest : public testing::TempDirTest {
 protected:
  // 8 tokens, a mask, and documents at 0, 3 and 6.
  std::string write_v3(const std::string& name) const {
    const std::vector<uint32_t> tokens = {1, 2, 3, 4, 5, 6, 7, 8};
    const std::vector<uint8_t> mask = {0, 1, 1, 0, 1, 1, 0, 1};
    const std::vector<uint64_t> starts = {0, 3, 6};
    write_token_file(path(name), tokens, mask, /*packed_seq_len=*/4, starts);
    return path(name);
  }
  // The file of write_v3 with its document table replaced by `table` (count included).
  std::string with_table(const std::string& name, const std::string& table) const {
    const std::string bytes = testing::read_text(write_v3(name));
    return write(name, bytes.substr(0, 32 + 8 * 5) + table);
  }
};

TEST_F(TokenFileDocumentsTest, Version3WritesTheTableAfterTheMask) {
  const std::string file_path = write_v3("d.bin");
  const std::string bytes = testing::read_text(file_path);
  ASSERT_EQ(bytes.size(), 32u + 8 * 5 + 8 + 3 * 8);
  EXPECT_EQ(bytes[8], 3) << "version 3";
  EXPECT_EQ(bytes[24], 4) << "packed_seq_len";
  EXPECT_EQ(bytes.substr(72), u64(3) + u64(0) + u64(3) + u64(6));

  const TokenFile file(file_path);
  EXPECT_EQ(file.version(), 3u);
  EXPECT_EQ(file.packed_seq_len(), 4u);
  ASSERT_TRUE(file.has_documents());
  EXPECT_EQ(std::vector<uint64_t>(file.document_starts().begin(), file.document_starts().end()),
            (std::vector<uint64_t>{0, 3, 6}));
  EXPECT_EQ(file.loss_mask()[7], 1);
  // Without documents the writer still writes version 2 or 1, which record none.
  write_token_file(path("v2.bin"), std::vector<uint32_t>{1, 2}, {}, 2);
  EXPECT_EQ(TokenFile(path("v2.bin")).version(), 2u);
  EXPECT_FALSE(TokenFile(path("v2.bin")).has_documents());
}

TEST_F(TokenFileDocumentsTest, InconsistentTablesAreOneLineNamingTheFile) {
  struct Case {
    std::string table, expected;
  };
  const std::vector<Case> cases = {
      {u64(3) + u64(0) + u64(3) + u64(8), "entry 2 is 8, past the end of the 8 tokens"},
      {u64(3) + u64(0) + u64(5) + u64(5), "entry 2 is 5, not greater than entry 1 (5)"},
      {u64(3) + u64(0) + u64(5) + u64(2), "entry 2 is 2, not greater than entry 1 (5)"},
      {u64(2) + u64(1) + u64(5), "entry 0 is 1; the first document must start at token 0"},
      {u64(0), "the document table is empty"},
      {u64(9) + u64(0), "claims 9 documents for 8 tokens"},
      {u64(3) + u64(0) + u64(3), "require 104 bytes; the file is truncated"},
      {u64(1) + u64(0) + u64(0), "require 88 bytes; the file is corrupt (extra bytes)"},
      {u64(0xffffffffffffffffull), "claims 18446744073709551615 documents"},
      {"\x01\x00", "requires at least 80 bytes; the file is truncated"},
  };
  for (const Case& c : cases) {
    const std::string file_path = with_table("bad.bin", c.table);
    const std::string message = error_of([&] { TokenFile file(file_path); });
    EXPECT_NE(message.find(file_path), std::string::npos) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
    EXPECT_EQ(message.find('\n'), std::string::npos) << message;
    EXPECT_THROW(open_dataset(file_path, DataFormat::kTokens, 4, 0, PackingMode::kDocuments),
                 Error);
  }
}

TEST_F(TokenFileDocumentsTest, DocumentsModeGivesEachWindowItsStarts) {
  const auto dataset =
      open_dataset(write_v3("d.bin"), DataFormat::kTokens, 4, 0, PackingMode::kDocuments);
  ASSERT_EQ(dataset->size(), 2u);
  // Window [0, 4): a document begins at 3. Window [4, 8): at 6 (position 2); the one that began
  // at 3 runs on into the window, whose first token begins a document anyway.
  EXPECT_EQ(dataset->get(0).document_starts, (std::vector<int32_t>{3}));
  EXPECT_EQ(dataset->get(1).document_starts, (std::vector<int32_t>{2}));
  const Batch batch = make_batch({dataset->get(0), dataset->get(1)});
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1, 2, 0, 0, 1, 0, 1}));
  EXPECT_EQ(batch.document_start_BT, (std::vector<int32_t>{0, 0, 0, 3, 0, 0, 2, 2}));
  // Targets: labels shifted; the token before a document start predicts nothing.
  EXPECT_EQ(batch.targets, (std::vector<int32_t>{2, 3, -100, -100, 6, -100, 8, -100}));
}

TEST_F(TokenFileDocumentsTest, ConcatenateIgnoresTheTable) {
  const auto dataset =
      open_dataset(write_v3("d.bin"), DataFormat::kTokens, 4, 0, PackingMode::kConcatenate);
  EXPECT_TRUE(dataset->get(0).document_starts.empty());
  const Batch batch = make_batch({dataset->get(0)});
  EXPECT_FALSE(batch.has_documents());
  EXPECT_EQ(batch.positions, (std::vector<int32_t>{0, 1, 2, 3}));
}

TEST_F(TokenFileDocumentsTest, NoneRefusesAWindowOfSeveralDocuments) {
  const std::string file_path = write_v3("d.bin");
  const std::string message =
      error_of([&] { open_dataset(file_path, DataFormat::kTokens, 4, 0, PackingMode::kNone); });
  EXPECT_NE(message.find(file_path + ": sequence 0 (tokens [0, 4)) holds more than one document"),
            std::string::npos)
      << message;
  EXPECT_NE(message.find("one begins at token 3"), std::string::npos) << message;
  // One document per window: accepted, and the examples carry no starts.
  write_token_file(path("one.bin"), std::vector<uint32_t>{1, 2, 3, 4, 5, 6}, {}, 3,
                   std::vector<uint64_t>{0, 3});
  const auto dataset = open_dataset(path("one.bin"), DataFormat::kTokens, 3, 0, PackingMode::kNone);
  EXPECT_EQ(dataset->size(), 2u);
  EXPECT_TRUE(dataset->get(1).document_starts.empty());
}

TEST_F(TokenFileDocumentsTest, OlderFilesLoadAsConcatenate) {
  write_token_file(path("old.bin"), std::vector<uint32_t>{1, 2, 3, 4, 5, 6}, {}, 3);
  for (const PackingMode mode : {PackingMode::kDocuments, PackingMode::kNone}) {
    const auto dataset = open_dataset(path("old.bin"), DataFormat::kTokens, 3, 0, mode);
    ASSERT_EQ(dataset->size(), 2u);
    EXPECT_TRUE(dataset->get(0).document_starts.empty());
    EXPECT_EQ(make_batch({dataset->get(0)}).positions, (std::vector<int32_t>{0, 1, 2}));
  }
}

TEST_F(TokenFileDocumentsTest, PackingModeNames) {
  EXPECT_EQ(parse_choice(packing_mode_names(), "documents", "--packing"), PackingMode::kDocuments);
  EXPECT_EQ(parse_choice(packing_choice_names(), "auto", "data.packing"), std::nullopt);
  EXPECT_EQ(parse_choice(packing_choice_names(), "none", "data.packing"), PackingMode::kNone);
  const std::string message =
      error_of([] { parse_choice(packing_choice_names(), "document", "data.packing"); });
  EXPECT_NE(message.find("data.packing must be one of auto, documents, concatenate, none; got "
                         "\"document\""),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace shardtrain
