#include "data/token_file.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "data/dataset.h"

namespace shardtrain {
namespace {

using testing::error_of;

class TokenFileTest : public testing::TempDirTest {
 protected:
  void write_bytes(const std::string& file, const std::string& bytes) const {
    std::ofstream(file, std::ios::binary) << bytes;
  }
};

TEST_F(TokenFileTest, WritesTheDocumentedLayout) {
  const std::vector<uint32_t> tokens = {1, 258, 0x01020304};
  write_token_file(path("a.bin"), tokens);
  const std::string bytes = testing::read_text(path("a.bin"));
  ASSERT_EQ(bytes.size(), 32u + 12u);
  EXPECT_EQ(bytes.substr(0, 8), "SHTOKENS");
  const std::string expected_rest(
      "\x01\x00\x00\x00"                  // version 1
      "\x00\x00\x00\x00"                  // flags: no mask
      "\x03\x00\x00\x00\x00\x00\x00\x00"  // n_tokens 3
      "\x00\x00\x00\x00\x00\x00\x00\x00"  // reserved
      "\x01\x00\x00\x00"                  // 1
      "\x02\x01\x00\x00"                  // 258
      "\x04\x03\x02\x01",                 // 0x01020304 little-endian
      36);
  EXPECT_EQ(bytes.substr(8), expected_rest);
  EXPECT_FALSE(std::filesystem::exists(path("a.bin") + ".tmp." + std::to_string(getpid())));
}

TEST_F(TokenFileTest, RoundTripWithMask) {
  const std::vector<uint32_t> tokens = {5, 6, 7, 8};
  const std::vector<uint8_t> mask = {0, 1, 7, 0};  // nonzero is written as 1
  write_token_file(path("m.bin"), tokens, mask);
  const std::string bytes = testing::read_text(path("m.bin"));
  ASSERT_EQ(bytes.size(), 32u + 16u + 4u);
  EXPECT_EQ(bytes[12], '\x01') << "flags bit 0";
  EXPECT_EQ(bytes.substr(48), std::string("\x00\x01\x01\x00", 4));

  TokenFile file(path("m.bin"));
  EXPECT_EQ(file.size(), 4u);
  EXPECT_TRUE(file.has_loss_mask());
  EXPECT_EQ(std::vector<uint32_t>(file.tokens().begin(), file.tokens().end()), tokens);
  EXPECT_EQ(std::vector<uint8_t>(file.loss_mask().begin(), file.loss_mask().end()),
            (std::vector<uint8_t>{0, 1, 1, 0}));
  TokenFile moved = std::move(file);
  EXPECT_EQ(moved.tokens()[3], 8u);
}

TEST_F(TokenFileTest, RewriteReplacesAtomically) {
  write_token_file(path("r.bin"), std::vector<uint32_t>{1, 2, 3});
  write_token_file(path("r.bin"), std::vector<uint32_t>{9});
  TokenFile file(path("r.bin"));
  ASSERT_EQ(file.size(), 1u);
  EXPECT_EQ(file.tokens()[0], 9u);
}

TEST_F(TokenFileTest, TruncatedFileNamesExpectedAndActualSize) {
  write_token_file(path("t.bin"), std::vector<uint32_t>{1, 2, 3, 4});
  std::string bytes = testing::read_text(path("t.bin"));
  write_bytes(path("t.bin"), bytes.substr(0, bytes.size() - 3));
  const std::string message = error_of([&] { TokenFile file(path("t.bin")); });
  EXPECT_NE(message.find(path("t.bin")), std::string::npos) << message;
  EXPECT_NE(message.find("size is 45 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("requires 48 bytes"), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
}

// A FIFO named as a token file is refused at once: its open would wait for a writer forever.
TEST_F(TokenFileTest, AFifoIsRefusedWithoutWaiting) {
  ASSERT_EQ(::mkfifo(path("fifo.bin").c_str(), 0600), 0);
  const std::string message = error_of([&] { TokenFile file(path("fifo.bin")); });
  EXPECT_NE(message.find("fifo.bin: not a regular file"), std::string::npos) << message;
}

TEST_F(TokenFileTest, TruncatedMaskIsCaught) {
  write_token_file(path("t.bin"), std::vector<uint32_t>{1, 2}, std::vector<uint8_t>{1, 1});
  std::string bytes = testing::read_text(path("t.bin"));
  write_bytes(path("t.bin"), bytes.substr(0, bytes.size() - 1));
  EXPECT_NE(error_of([&] { TokenFile file(path("t.bin")); }).find("requires 42 bytes"),
            std::string::npos);
}

TEST_F(TokenFileTest, HeaderOnlyPartIsTooSmall) {
  write_bytes(path("h.bin"), "SHTOKENS\x01");
  const std::string message = error_of([&] { TokenFile file(path("h.bin")); });
  EXPECT_NE(message.find("9 bytes is smaller than the 32-byte header"), std::string::npos)
      << message;
}

TEST_F(TokenFileTest, WrongMagic) {
  write_token_file(path("w.bin"), std::vector<uint32_t>{1});
  std::string bytes = testing::read_text(path("w.bin"));
  bytes.replace(0, 8, "GGUF\x03\x00\x00\x00", 8);
  write_bytes(path("w.bin"), bytes);
  const std::string message = error_of([&] { TokenFile file(path("w.bin")); });
  EXPECT_NE(message.find("not a shardtrain token file (magic \"GGUF\\x03\\x00\\x00\\x00\""),
            std::string::npos)
      << message;
}

TEST_F(TokenFileTest, WrongVersionFlagsReserved) {
  write_token_file(path("v.bin"), std::vector<uint32_t>{1});
  const std::string good = testing::read_text(path("v.bin"));
  std::string bytes = good;
  bytes[8] = 4;
  write_bytes(path("v.bin"), bytes);
  EXPECT_NE(error_of([&] { TokenFile f(path("v.bin")); }).find("unsupported version 4"),
            std::string::npos);
  bytes = good;
  bytes[12] = 4;
  write_bytes(path("v.bin"), bytes);
  EXPECT_NE(error_of([&] { TokenFile f(path("v.bin")); }).find("unknown flags 0x4"),
            std::string::npos);
  bytes = good;
  bytes[24] = 1;
  write_bytes(path("v.bin"), bytes);
  EXPECT_NE(error_of([&] { TokenFile f(path("v.bin")); }).find("reserved header field is 1"),
            std::string::npos);
}

TEST_F(TokenFileTest, Version2RecordsThePackedSequenceLength) {
  const std::vector<uint32_t> tokens = {5, 6, 7, 8};
  write_token_file(path("p.bin"), tokens, {}, /*packed_seq_len=*/2);
  const std::string bytes = testing::read_text(path("p.bin"));
  EXPECT_EQ(bytes[8], 2) << "version 2";
  EXPECT_EQ(bytes[24], 2) << "packed_seq_len at offset 24";
  const TokenFile file(path("p.bin"));
  EXPECT_EQ(file.packed_seq_len(), 2u);
  EXPECT_EQ(file.size(), 4u);
  EXPECT_EQ(file.tokens()[3], 8u);
  // An old (version 1) file still loads and records nothing.
  write_token_file(path("old.bin"), tokens);
  EXPECT_EQ(testing::read_text(path("old.bin"))[8], 1);
  EXPECT_EQ(TokenFile(path("old.bin")).packed_seq_len(), 0u);
}

TEST_F(TokenFileTest, EmptyFileAndZeroTokens) {
  write_bytes(path("e.bin"), "");
  EXPECT_NE(error_of([&] { TokenFile f(path("e.bin")); }).find("the file is empty"),
            std::string::npos);
  write_token_file(path("z.bin"), std::vector<uint32_t>{1});
  std::string bytes = testing::read_text(path("z.bin")).substr(0, 32);
  bytes[16] = 0;  // n_tokens = 0
  write_bytes(path("z.bin"), bytes);
  EXPECT_NE(error_of([&] { TokenFile f(path("z.bin")); }).find("contains no tokens"),
            std::string::npos);
}

TEST_F(TokenFileTest, HugeTokenCountDoesNotOverflow) {
  write_token_file(path("o.bin"), std::vector<uint32_t>{1});
  std::string bytes = testing::read_text(path("o.bin"));
  std::memset(bytes.data() + 16, 0xff, 8);
  write_bytes(path("o.bin"), bytes);
  EXPECT_NE(error_of([&] { TokenFile f(path("o.bin")); }).find("header is corrupt"),
            std::string::npos);
}

// A version 3 header whose token count leaves no room for the document table's count before
// UINT64_MAX (a fuzzer's find): the size check must not wrap around and read past the mapping.
TEST_F(TokenFileTest, HugeTokenCountWithADocumentTableDoesNotWrap) {
  std::string bytes = "SHTOKENS";
  const auto put = [&](uint64_t value, int width) {
    for (int i = 0; i < width; ++i) bytes.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
  };
  put(3, 4);                      // version 3: a document table follows the data
  put(1, 4);                      // flags: loss mask
  put(0x333333333333332cull, 8);  // n_tokens: 32 + 5 n fits in 64 bits, + 8 does not
  put(64, 8);                     // packed seq_len
  bytes.resize(32, '\0');
  bytes += std::string(24, '\x21');
  write_bytes(path("w.bin"), bytes);
  const std::string message = error_of([&] { TokenFile f(path("w.bin")); });
  EXPECT_NE(message.find("header is corrupt"), std::string::npos) << message;
}

TEST_F(TokenFileTest, MissingFile) {
  EXPECT_NE(error_of([&] { TokenFile f(path("none.bin")); }).find("cannot open"),
            std::string::npos);
}

// ---- the token file as a SequenceDataset ----

TEST_F(TokenFileTest, DatasetCutsNonOverlappingWindowsAndDropsRemainder) {
  write_token_file(path("d.bin"), std::vector<uint32_t>{10, 11, 12, 13, 14, 15, 16});
  const auto dataset = open_dataset(path("d.bin"), DataFormat::kAuto, 3, 0);
  ASSERT_EQ(dataset->size(), 2u);
  EXPECT_EQ(dataset->get(0).input_ids, (std::vector<int32_t>{10, 11, 12}));
  EXPECT_EQ(dataset->get(1).input_ids, (std::vector<int32_t>{13, 14, 15}));
  EXPECT_EQ(dataset->get(1).labels, (std::vector<int32_t>{13, 14, 15})) << "no mask: all count";
  EXPECT_EQ(dataset->max_token_id(), 15) << "the dropped tail (16) is not part of the data";
  EXPECT_EQ(dataset->truncated_count(), 0u);
}

TEST_F(TokenFileTest, DatasetAppliesLossMask) {
  write_token_file(path("m.tokens"), std::vector<uint32_t>{1, 2, 3, 4},
                   std::vector<uint8_t>{0, 0, 1, 1});
  const auto dataset = open_dataset(path("m.tokens"), DataFormat::kAuto, 4, 0);
  ASSERT_EQ(dataset->size(), 1u);
  EXPECT_EQ(dataset->get(0).labels, (std::vector<int32_t>{-100, -100, 3, 4}));
}

TEST_F(TokenFileTest, DatasetShorterThanSeqLen) {
  write_token_file(path("s.bin"), std::vector<uint32_t>{1, 2, 3});
  const std::string message =
      error_of([&] { open_dataset(path("s.bin"), DataFormat::kTokens, 4, 0); });
  EXPECT_NE(message.find("has 3 tokens, fewer than data.seq_len = 4"), std::string::npos)
      << message;
}

TEST_F(TokenFileTest, ValidateVocabNamesIdAndWindow) {
  write_token_file(path("v.bin"), std::vector<uint32_t>{1, 2, 3, 4, 300, 5});
  const auto dataset = open_dataset(path("v.bin"), DataFormat::kAuto, 2, 0);
  EXPECT_NO_THROW(validate_vocab(*dataset, 301, path("v.bin")));
  const std::string message = error_of([&] { validate_vocab(*dataset, 260, path("v.bin")); });
  EXPECT_NE(message.find(path("v.bin") + " tokens [4, 6)"), std::string::npos) << message;
  EXPECT_NE(message.find("token id 300"), std::string::npos) << message;
  EXPECT_NE(message.find("vocab_size 260"), std::string::npos) << message;
}

TEST_F(TokenFileTest, IdsAboveInt32AreRejectedByVocab) {
  write_token_file(path("b.bin"), std::vector<uint32_t>{1, 0x90000000u});
  const auto dataset = open_dataset(path("b.bin"), DataFormat::kAuto, 2, 0);
  EXPECT_NE(
      error_of([&] { validate_vocab(*dataset, 1000, path("b.bin")); }).find("token id 2415919104"),
      std::string::npos);
}

TEST_F(TokenFileTest, FormatResolution) {
  EXPECT_EQ(resolve_data_format("x/a.bin", DataFormat::kAuto), DataFormat::kTokens);
  EXPECT_EQ(resolve_data_format("a.tokens", DataFormat::kAuto), DataFormat::kTokens);
  EXPECT_EQ(resolve_data_format("a.jsonl", DataFormat::kAuto), DataFormat::kJsonl);
  EXPECT_EQ(resolve_data_format("a.json", DataFormat::kAuto), DataFormat::kJsonl);
  EXPECT_EQ(resolve_data_format("a.txt", DataFormat::kJsonl), DataFormat::kJsonl);
  EXPECT_NE(
      error_of([] { resolve_data_format("a.txt", DataFormat::kAuto); }).find("set data.format"),
      std::string::npos);
  EXPECT_NE(error_of([&] {
              open_dataset(path("absent.bin"), DataFormat::kAuto, 4, 0);
            }).find("no such file"),
            std::string::npos);
}

TEST(DemoData, CommittedFileIsAValidByteLevelTokenFile) {
  const std::string path = std::string(SHARDTRAIN_SOURCE_DIR) + "/examples/demo-data.bin";
  TokenFile file(path);
  EXPECT_EQ(file.size(), 600000u);
  EXPECT_FALSE(file.has_loss_mask());
  const auto dataset = open_dataset(path, DataFormat::kAuto, 128, 0);
  EXPECT_EQ(dataset->size(), 600000u / 128);
  EXPECT_LT(dataset->max_token_id(), 128) << "ASCII text";
  EXPECT_NO_THROW(validate_vocab(*dataset, 260, path));
}

}  // namespace
}  // namespace shardtrain
