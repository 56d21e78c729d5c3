// data.packing as train and eval read it (train/training_data.h): the key's default and a
// misspelling (one line naming the key), raw examples packed per document or one per sequence
// through the prepare cache, and a token file that records no documents.
#include "train/training_data.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "data/batch.h"
#include "data/testing/tiny_tokenizer.h"
#include "data/token_file.h"
#include "train/train_config.h"

namespace shardtrain {
namespace {

using testing::error_of;

class TrainingDataTest : public testing::TempDirTest {
 protected:
  DataConfig raw_examples() {
    DataConfig data;
    // One token per byte: 4 + 6 + 3 tokens with separators fit one sequence of 16.
    data.path =
        write("text.jsonl", "{\"text\": \"abc\"}\n{\"text\": \"defgh\"}\n{\"text\": \"ij\"}\n");
    data.tokenizer = testing::write_tiny_tokenizer(dir_ / "tokenizer");
    data.cache_dir = path("cache");
    data.seq_len = 16;
    return data;
  }
};

TEST_F(TrainingDataTest, PackingKeyDefaultsToAutoAndRejectsMisspellings) {
  TrainConfig config;
  ConfigSchema schema;
  config.register_config(schema);
  EXPECT_EQ(config.data.packing, std::nullopt);
  const std::string file = write("c.toml", "[data]\npacking = \"document\"\n");
  const std::string message = error_of([&] { schema.load_toml_file(file); });
  EXPECT_NE(message.find("data.packing"), std::string::npos) << message;
  EXPECT_NE(message.find("concatenate"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
  schema.load_toml_file(write("ok.toml", "[data]\npacking = \"none\"\n"));
  EXPECT_EQ(config.data.packing, PackingMode::kNone);
}

TEST_F(TrainingDataTest, AutoPackingIsDocuments) {
  DataConfig data;
  EXPECT_EQ(data.packing, std::nullopt);
  EXPECT_EQ(with_packing_resolved(data).packing, PackingMode::kDocuments);
  data.packing = PackingMode::kConcatenate;  // an explicit choice is kept
  EXPECT_EQ(with_packing_resolved(data).packing, PackingMode::kConcatenate);
  data.packing = PackingMode::kDocuments;
  EXPECT_EQ(with_packing_resolved(data).packing, PackingMode::kDocuments);
  data.packing = PackingMode::kNone;
  EXPECT_EQ(with_packing_resolved(data).packing, PackingMode::kNone);
}

TEST_F(TrainingDataTest, RawExamplesArePackedWithTheirDocuments) {
  const DataConfig data = raw_examples();
  const auto dataset = open_training_data(data, "", 0);
  ASSERT_EQ(dataset->size(), 1u);
  const Example example = dataset->get(0);
  ASSERT_EQ(example.document_starts.size(), 2u);
  const Batch batch = make_batch({example});
  EXPECT_EQ(batch.max_documents, 3);
  // Positions restart at each document: three of them are 0.
  EXPECT_EQ(std::count(batch.positions.begin(), batch.positions.end(), 0), 3);
  // 3 + 5 + 2 trained tokens: every document's first token is not a target.
  EXPECT_EQ(batch.target_count, 10);

  DataConfig stream = data;
  stream.packing = PackingMode::kConcatenate;
  const Example same = open_training_data(stream, "", 0)->get(0);
  EXPECT_EQ(same.input_ids, example.input_ids) << "one cached file for both";
  EXPECT_TRUE(same.document_starts.empty());
}

TEST_F(TrainingDataTest, PackingNoneGivesEachExampleASequence) {
  DataConfig data = raw_examples();
  data.packing = PackingMode::kNone;
  const auto dataset = open_training_data(data, "", 0);
  ASSERT_EQ(dataset->size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(dataset->get(i).document_starts.empty());
  // An example longer than seq_len: one line naming the file and line.
  data.path =
      write("long.jsonl", "{\"text\": \"ab\"}\n{\"text\": \"" + std::string(30, 'x') + "\"}\n");
  const std::string message = error_of([&] { open_training_data(data, "", 0); });
  EXPECT_EQ(message.rfind(data.path + ":2: the example is 31 tokens", 0), 0u) << message;
}

// The format probe reads the first line with the JSONL bound: a file without newlines is named,
// not read whole.
TEST_F(TrainingDataTest, FormatProbeRefusesAFirstLineLongerThan256MiB) {
  DataConfig data;
  data.path = write("one-line.jsonl", "\n[");
  ASSERT_EQ(::truncate(data.path.c_str(), 300 << 20), 0);  // sparse, no newline after "["
  const std::string message = error_of([&] { resolve_training_data_format(data); });
  EXPECT_NE(message.find("one-line.jsonl:2: the line is longer than 256 MiB"), std::string::npos)
      << message;
}

// The format probe does not open a FIFO (it would wait for a writer): the JSONL reader names it.
TEST_F(TrainingDataTest, FormatProbeLeavesAFifoToTheReader) {
  DataConfig data;
  data.path = path("fifo.jsonl");
  ASSERT_EQ(::mkfifo(data.path.c_str(), 0600), 0);
  EXPECT_EQ(resolve_training_data_format(data), DataFormat::kJsonl);
  const std::string message = error_of([&] { open_training_data(data, "", 0); });
  EXPECT_NE(message.find("fifo.jsonl: not a regular file"), std::string::npos) << message;
}

TEST_F(TrainingDataTest, OldTokenFileLoadsAsConcatenate) {
  write_token_file(path("old.bin"), std::vector<uint32_t>{1, 2, 3, 4, 5, 6}, {}, 3);
  DataConfig data;
  data.path = path("old.bin");
  data.seq_len = 3;
  const auto dataset = open_training_data(data, "", 0);
  ASSERT_EQ(dataset->size(), 2u);
  EXPECT_TRUE(dataset->get(0).document_starts.empty());
}

}  // namespace
}  // namespace shardtrain
