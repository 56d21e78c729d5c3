#include "data/jsonl_dataset.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "data/jsonl_lines.h"

namespace shardtrain {
namespace {

using testing::error_of;

class JsonlDatasetTest : public testing::TempDirTest {
 protected:
  std::string write(const std::string& contents, const std::string& name = "d.jsonl") {
    const std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
  // The error from loading `contents` with seq_len 4.
  std::string load_error(const std::string& contents) {
    const std::string path = write(contents);
    return error_of([&] { JsonlDataset dataset(path, 4, 0); });
  }
};

TEST_F(JsonlDatasetTest, PadsTruncatesAndKeepsLabels) {
  const std::string path = write(
      "{\"input_ids\": [1, 2]}\n"
      "\n"
      "{\"input_ids\": [3, 4, 5, 6, 7, 8], \"text\": \"ignored field\"}\r\n"
      "{\"input_ids\": [9, 10, 11, 12], \"labels\": [-100, -100, 11, 12]}\n");
  JsonlDataset dataset(path, 4, 99);
  ASSERT_EQ(dataset.size(), 3u);
  EXPECT_EQ(dataset.get(0).input_ids, (std::vector<int32_t>{1, 2, 99, 99}));
  EXPECT_EQ(dataset.get(0).labels, (std::vector<int32_t>{1, 2, -100, -100}));
  EXPECT_EQ(dataset.get(1).input_ids, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(dataset.get(1).labels, (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(dataset.get(2).labels, (std::vector<int32_t>{-100, -100, 11, 12}));
  EXPECT_EQ(dataset.truncated_count(), 1u);
  EXPECT_EQ(dataset.max_token_id(), 99) << "pad id is in the data; 7 and 8 were cut";
  EXPECT_EQ(dataset.padding_id(), std::optional<int64_t>(99));
  EXPECT_EQ(dataset.describe_example(1), path + ":3");
  EXPECT_EQ(dataset.describe_example(2), path + ":4");
}

TEST_F(JsonlDatasetTest, NoPaddingMeansPadIdIsNotUsed) {
  JsonlDataset dataset(write("{\"input_ids\": [1, 2, 3, 4]}\n"), 4, 7);
  EXPECT_FALSE(dataset.padding_id().has_value());
  EXPECT_EQ(dataset.max_token_id(), 4);
}

TEST_F(JsonlDatasetTest, OpenDatasetByExtension) {
  const auto dataset = open_dataset(write("{\"input_ids\": [5, 6, 7]}\n"), DataFormat::kAuto, 2, 0);
  ASSERT_EQ(dataset->size(), 1u);
  EXPECT_EQ(dataset->get(0).input_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(dataset->truncated_count(), 1u);
}

constexpr const char* kTwoGoodLines = "{\"input_ids\": [1]}\n{\"input_ids\": [2]}\n";

TEST_F(JsonlDatasetTest, BadJsonNamesTheLine) {
  const std::string message = load_error(std::string(kTwoGoodLines) + "{\"input_ids\": [1,\n");
  EXPECT_NE(message.find("d.jsonl:3: not valid JSON"), std::string::npos) << message;
  EXPECT_EQ(message.find("[json.exception"), std::string::npos) << message;
}

TEST_F(JsonlDatasetTest, EveryLineErrorNamesFileAndLine) {
  struct Case {
    const char* line;
    const char* fragment;
  };
  const Case cases[] = {
      {"[1, 2, 3]", "d.jsonl:3: expected a JSON object"},
      {"{\"tokens\": [1]}", "d.jsonl:3: missing \"input_ids\""},
      {"{\"input_ids\": \"hello\"}", "d.jsonl:3: \"input_ids\" must be an array"},
      {"{\"input_ids\": []}", "d.jsonl:3: \"input_ids\" is empty"},
      {"{\"input_ids\": [1, 2.5]}", "d.jsonl:3: input_ids[1] is 2.5; token ids must be integers"},
      {"{\"input_ids\": [1, \"x\"]}", "d.jsonl:3: input_ids[1] is \"x\""},
      {"{\"input_ids\": [1, -1]}", "d.jsonl:3: input_ids[1] is -1; token ids must be >= 0"},
      {"{\"input_ids\": [1, -100]}", "input_ids[1] is -100; token ids must be >= 0"},
      {"{\"input_ids\": [3000000000]}", "larger than any supported token id"},
      {"{\"input_ids\": [1, 2], \"labels\": [1]}",
       "d.jsonl:3: \"labels\" has 1 entries but \"input_ids\" has 2"},
      {"{\"input_ids\": [1, 2], \"labels\": [1, -5]}",
       "d.jsonl:3: labels[1] is -5; labels must be >= 0 or -100"},
      {"{\"input_ids\": [1], \"labels\": 1}", "d.jsonl:3: \"labels\" must be an array"},
  };
  for (const Case& c : cases) {
    const std::string message = load_error(std::string(kTwoGoodLines) + c.line + "\n");
    EXPECT_NE(message.find(c.fragment), std::string::npos) << c.line << " -> " << message;
  }
}

// A line longer than the bound (a JSON array written on one line, a file without newlines) is
// refused by its file and line number once the bound is passed, not read whole and parsed.
TEST_F(JsonlDatasetTest, ALineLongerThan256MiBIsRefusedUnread) {
  const std::string path = write(std::string(kTwoGoodLines) + "{\"input_ids\": [");
  // 300 MiB of zero bytes after it without a newline, as a sparse file: nothing large is written.
  ASSERT_EQ(::truncate(path.c_str(), 300 << 20), 0);
  const std::string message = error_of([&] { JsonlDataset dataset(path, 4, 0); });
  EXPECT_NE(message.find("d.jsonl:3: the line is longer than 256 MiB"), std::string::npos)
      << message;
  EXPECT_NE(message.find("one record per line"), std::string::npos) << message;
}

// A FIFO or a device named as the data would hold the open or the read forever: refused unread.
TEST_F(JsonlDatasetTest, AFifoOrDeviceIsRefusedUnread) {
  const std::string fifo = (dir_ / "fifo.jsonl").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& path : {fifo, std::string("/dev/zero")}) {
    const std::string message = error_of([&] { JsonlDataset dataset(path, 4, 0); });
    EXPECT_NE(message.find("jsonl " + path + ": not a regular file"), std::string::npos) << message;
  }
}

TEST(JsonlLines, ReadsLinesAsGetlineDoesAndStopsPastTheBound) {
  std::istringstream in("first\n\nthird\r\nlast without newline");
  std::string line;
  std::vector<std::string> lines;
  for (size_t number = 1; read_jsonl_line(in, line, "in", number, 32); ++number) {
    lines.push_back(line);
  }
  EXPECT_EQ(lines, (std::vector<std::string>{"first", "", "third\r", "last without newline"}));
  EXPECT_FALSE(read_jsonl_line(in, line, "in", 9, 32)) << "stays at the end";

  std::istringstream ends_in_newline("one\n");
  EXPECT_TRUE(read_jsonl_line(ends_in_newline, line, "in", 1, 32));
  EXPECT_FALSE(read_jsonl_line(ends_in_newline, line, "in", 2, 32)) << "no empty last line";

  std::istringstream at_the_bound(std::string(16, 'y') + "\n" + std::string(16, 'z'));
  EXPECT_TRUE(read_jsonl_line(at_the_bound, line, "in", 1, 16));
  EXPECT_EQ(line, std::string(16, 'y')) << "a line of exactly the bound is read";
  EXPECT_TRUE(read_jsonl_line(at_the_bound, line, "in", 2, 16));
  EXPECT_EQ(line, std::string(16, 'z')) << "and so is a last one without its newline";
  EXPECT_FALSE(read_jsonl_line(at_the_bound, line, "in", 3, 16));

  std::istringstream long_line("short\n" + std::string(100, 'x') + "\nafter\n");
  EXPECT_TRUE(read_jsonl_line(long_line, line, "stdin", 1, 16));
  const std::string message = error_of([&] { read_jsonl_line(long_line, line, "stdin", 2, 16); });
  EXPECT_EQ(message,
            "stdin:2: the line is longer than 16 bytes; JSONL needs one record per line (is the "
            "file a JSON array or a file without newlines?)");
  EXPECT_EQ(long_line.tellg(), std::streampos(6 + 17)) << "read only the bound + 1 byte";
}

TEST_F(JsonlDatasetTest, EmptyFileAndBlankFile) {
  EXPECT_NE(load_error("").find("the file is empty"), std::string::npos);
  EXPECT_NE(load_error("\n  \n\n").find("contains no sequences"), std::string::npos);
  EXPECT_NE(
      error_of([&] { JsonlDataset d((dir_ / "none.jsonl").string(), 4, 0); }).find("cannot open"),
      std::string::npos);
}

TEST_F(JsonlDatasetTest, ValidateVocabNamesLineIdAndVocab) {
  const std::string path =
      write("{\"input_ids\": [1, 2]}\n{\"input_ids\": [3, 4]}\n{\"input_ids\": [5, 600]}\n");
  const auto dataset = open_dataset(path, DataFormat::kJsonl, 2, 0);
  EXPECT_NO_THROW(validate_vocab(*dataset, 601, path));
  const std::string message = error_of([&] { validate_vocab(*dataset, 260, path); });
  EXPECT_NE(message.find(path + ":3"), std::string::npos) << message;
  EXPECT_NE(message.find("token id 600"), std::string::npos) << message;
  EXPECT_NE(message.find("vocab_size 260"), std::string::npos) << message;
}

TEST_F(JsonlDatasetTest, ValidateVocabChecksLabelsToo) {
  const std::string path = write("{\"input_ids\": [1, 2], \"labels\": [1, 500]}\n");
  const auto dataset = open_dataset(path, DataFormat::kJsonl, 2, 0);
  EXPECT_NE(error_of([&] { validate_vocab(*dataset, 260, path); }).find("token id 500"),
            std::string::npos);
}

TEST_F(JsonlDatasetTest, ValidateVocabBlamesPadId) {
  const std::string path = write("{\"input_ids\": [1]}\n");
  const auto dataset = open_dataset(path, DataFormat::kJsonl, 4, 300);
  const std::string message = error_of([&] { validate_vocab(*dataset, 260, path); });
  EXPECT_NE(message.find("data.pad_id = 300 is >= the model's vocab_size 260"), std::string::npos)
      << message;
}

}  // namespace
}  // namespace shardtrain
