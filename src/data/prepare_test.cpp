// Tests of `prepare` as a library (data/prepare.h, prepare_cache.h): determinism across thread
// counts, the report, every bad input, the cache, and the resumable sampler state. Uses the tiny
// hand-written tokenizer (data/testing/tiny_tokenizer.h): one token per byte.
#include "data/prepare.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "data/dataset.h"
#include "data/prepare_cache.h"
#include "data/sampler.h"
#include "data/testing/tiny_tokenizer.h"
#include "data/token_file.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;

class PrepareTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    tokenizer_ = testing::write_tiny_tokenizer(dir_ / "tokenizer");
  }

  PrepareOptions options(const std::string& data) const {
    PrepareOptions out;
    out.tokenizer_path = tokenizer_;
    out.data_path = data;
    out.out_path = (dir_ / "out.bin").string();
    out.seq_len = 16;
    out.threads = 2;
    return out;
  }
  std::string error_of(const PrepareOptions& options) const {
    try {
      prepare_dataset(options);
    } catch (const Error& error) {
      return error.what();
    }
    return "(no error)";
  }

  std::string tokenizer_;
};

TEST_F(PrepareTest, OutputIsIdenticalWithOneOrFourThreads) {
  std::string lines;
  for (int i = 0; i < 3000; ++i) {
    if (i % 3 == 0) {
      lines += "{\"messages\": [{\"role\": \"user\", \"content\": \"q" + std::to_string(i) +
               "\"}, {\"role\": \"assistant\", \"content\": \"" + std::string(1 + i % 40, 'a') +
               "\"}]}\n";
    } else {
      lines += "{\"messages\": [{\"role\": \"user\", \"content\": \"hello " +
               std::string(i % 23, 'x') + "\"}, {\"role\": \"assistant\", \"content\": \"ok\"}]}\n";
    }
  }
  PrepareOptions one = options(write("chat.jsonl", lines));
  one.seq_len = 64;
  one.threads = 1;
  one.out_path = (dir_ / "one.bin").string();
  PrepareOptions four = one;
  four.threads = 4;
  four.out_path = (dir_ / "four.bin").string();
  const PrepareReport report = prepare_dataset(one);
  prepare_dataset(four);
  EXPECT_EQ(testing::read_existing(one.out_path), testing::read_existing(four.out_path));
  EXPECT_EQ(report.format, "chat");
  // The tiny tokenizer_config.json's own (ChatML) chat_template renders the chats.
  EXPECT_EQ(report.chat_template.rfind("the model's own, from ", 0), 0u) << report.chat_template;
  EXPECT_EQ(report.examples, 3000u);
  // The token file's seq_len windows are exactly the packed sequences.
  const auto dataset = open_dataset(one.out_path, DataFormat::kTokens, 64, 0);
  EXPECT_EQ(dataset->size(), report.packing.sequences);
  EXPECT_EQ(TokenFile(one.out_path).size(), report.packing.sequences * 64);
}

TEST_F(PrepareTest, ReportCountsBlankSkippedAndPadding) {
  PrepareOptions opts = options(
      write("text.jsonl",
            "{\"text\": \"abc\"}\n\n{\"text\": \"defgh\"}\nnot json\n{\"text\": \"ij\"}\n"));
  opts.on_bad_line = BadLinePolicy::kSkip;
  const PrepareReport report = prepare_dataset(opts);
  EXPECT_EQ(report.lines, 5u);
  EXPECT_EQ(report.blank_lines, 1u);
  EXPECT_EQ(report.examples, 3u);
  EXPECT_EQ(report.skipped_lines, 1u);
  ASSERT_EQ(report.skipped_samples.size(), 1u);
  EXPECT_EQ(report.skipped_samples[0].rfind(opts.data_path + ":4: not valid JSON", 0), 0u);
  // 4 + 6 + 3 tokens with separators fit one sequence of 16: 3 padding tokens.
  EXPECT_EQ(report.packing.sequences, 1u);
  EXPECT_EQ(report.packing.content_tokens, 13u);
  EXPECT_EQ(report.packing.padding_tokens, 3u);
  const TokenFile file(opts.out_path);
  EXPECT_EQ(file.size(), 16u);
  const std::string text = format_report(report);
  EXPECT_NE(text.find("padding 3 (18.75%)"), std::string::npos) << text;
}

TEST_F(PrepareTest, BadLinesFailNamingFileAndLine) {
  struct Case {
    std::string second_line;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"{\"text\": \"unterminated", ":2: not valid JSON"},
      {"{\"txt\": \"a\"}", ":2: missing \"text\""},
      {"{\"text\": 42}", ":2: \"text\" must be a string, got number"},
      {"{\"text\": \"\"}", ":2: \"text\" is empty"},
      {"{\"text\": \"a\xff\"}", ":2: invalid UTF-8 at byte 12"},
      {"[1, 2]", ":2: expected a JSON object"},
  };
  for (const Case& c : cases) {
    const std::string data = write("bad.jsonl", "{\"text\": \"fine\"}\n" + c.second_line + "\n");
    const std::string message = error_of(options(data));
    EXPECT_EQ(message.rfind(data + c.expected, 0), 0u) << message;
    PrepareOptions skipping = options(data);
    skipping.on_bad_line = BadLinePolicy::kSkip;
    EXPECT_EQ(prepare_dataset(skipping).skipped_lines, 1u) << c.second_line;
  }
}

// A line past the JSONL bound is a bad line like any other (named, or skipped with skip): its JSON
// tree is never built.
TEST_F(PrepareTest, ALineLongerThan256MiBIsABadLine) {
  const std::string data = write("long.jsonl", "{\"text\": \"fine\"}\n{\"text\": \"");
  ASSERT_EQ(::truncate(data.c_str(), 300 << 20), 0);  // sparse: 300 MiB of zero bytes, no newline
  const std::string message = error_of(options(data));
  EXPECT_EQ(message.rfind(data + ":2: the line is ", 0), 0u) << message;
  EXPECT_NE(message.find("longer than 256 MiB"), std::string::npos) << message;
  PrepareOptions skipping = options(data);
  skipping.on_bad_line = BadLinePolicy::kSkip;
  EXPECT_EQ(prepare_dataset(skipping).skipped_lines, 1u);
}

TEST_F(PrepareTest, AFifoIsRefusedUnread) {
  const std::string fifo = (dir_ / "fifo.jsonl").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(error_of(options(fifo)).rfind(fifo + ": not a regular file", 0), 0u);
}

TEST_F(PrepareTest, InvalidUtf8CanBeReplaced) {
  PrepareOptions opts = options(write("utf8.jsonl",
                                      "{\"text\": \"a\xff"
                                      "b\"}\n"));
  opts.invalid_utf8 = InvalidUtf8Policy::kReplace;
  prepare_dataset(opts);
  const TokenFile file(opts.out_path);
  // a, U+FFFD (EF BF BD), b, EOS
  const std::vector<uint32_t> expected = {
      'a', 0xEF, 0xBF, 0xBD, 'b', static_cast<uint32_t>(testing::tiny_special_id("<|endoftext|>"))};
  EXPECT_TRUE(std::equal(expected.begin(), expected.end(), file.tokens().begin()));
}

TEST_F(PrepareTest, ChatWithUnknownRoleNamesTheLine) {
  const std::string data =
      write("chat.jsonl",
            "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"assistant\", "
            "\"content\": \"b\"}]}\n{\"messages\": [{\"role\": \"robot\", \"content\": \"a\"}]}\n");
  PrepareOptions builtin = options(data);
  builtin.chat_template = ChatTemplateChoice::kChatml;
  const std::string message = error_of(builtin);
  EXPECT_EQ(message.rfind(data + ":2: messages[0] has unknown role \"robot\"", 0), 0u) << message;
  // The model's own template renders any role; the line then has nothing to train.
  const std::string own = error_of(options(data));
  EXPECT_EQ(own.rfind(data + ":2: the chat has no assistant reply", 0), 0u) << own;
}

TEST_F(PrepareTest, ModelTemplateAndBuiltInChatmlGiveTheSameTokensAndMasks) {
  const std::string data =
      write("chat.jsonl",
            "{\"messages\": [{\"role\": \"system\", \"content\": \"s\"}, {\"role\": \"user\", "
            "\"content\": \"ab\"}, {\"role\": \"assistant\", \"content\": \"ba\"}, {\"role\": "
            "\"user\", \"content\": \"a\"}, {\"role\": \"assistant\", \"content\": \"b\"}]}\n");
  PrepareOptions own = options(data);
  own.seq_len = 64;
  own.out_path = (dir_ / "own.bin").string();
  PrepareOptions builtin = own;
  builtin.chat_template = ChatTemplateChoice::kChatml;
  builtin.out_path = (dir_ / "builtin.bin").string();
  prepare_dataset(own);
  prepare_dataset(builtin);
  EXPECT_EQ(testing::read_existing(own.out_path), testing::read_existing(builtin.out_path));
}

TEST_F(PrepareTest, WholeDatasetProblems) {
  PrepareOptions all_bad = options(write("all_bad.jsonl", "{\"text\": \"\"}\n{\"text\": 1}\n"));
  all_bad.on_bad_line = BadLinePolicy::kSkip;
  EXPECT_NE(error_of(all_bad).find("no usable example"), std::string::npos) << error_of(all_bad);
  EXPECT_NE(error_of(options(write("empty.jsonl", "\n\n"))).find("no usable example"),
            std::string::npos);
  const std::string unknown = write("unknown.jsonl", "{\"question\": \"a\"}\n");
  EXPECT_EQ(error_of(options(unknown)).rfind(unknown + ":1: cannot tell the data format", 0), 0u);
  PrepareOptions too_long =
      options(write("long.jsonl", "{\"text\": \"" + std::string(40, 'a') + "\"}\n"));
  too_long.overlong = OverlongPolicy::kDrop;
  EXPECT_NE(error_of(too_long).find("were dropped"), std::string::npos);
  std::string bad_choice;
  try {
    parse_choice(chat_template_choice_names(), "vicuna", "--chat-template");
  } catch (const Error& error) {
    bad_choice = error.what();
  }
  EXPECT_NE(bad_choice.find("--chat-template must be one of auto, model, chatml, llama2, llama3; "
                            "got \"vicuna\""),
            std::string::npos)
      << bad_choice;
}

TEST_F(PrepareTest, UnsupportedTokenizerModelNamesTheFile) {
  nlohmann::json word_piece = testing::tiny_tokenizer_json();
  word_piece["model"]["type"] = "WordPiece";
  const std::string path = write("wordpiece.json", word_piece.dump());
  PrepareOptions opts = options(write("t.jsonl", "{\"text\": \"a\"}\n"));
  opts.tokenizer_path = path;
  const std::string message = error_of(opts);
  EXPECT_NE(message.find(path), std::string::npos) << message;
  EXPECT_NE(message.find("WordPiece"), std::string::npos) << message;
}

TEST_F(PrepareTest, CacheReusesTheFileAndKeysOnSettingsAndData) {
  const std::string data = write("cache.jsonl", "{\"text\": \"abc\"}\n");
  const std::string cache = (dir_ / "cache").string();
  PrepareOptions opts = options(data);
  const std::string first = prepare_cached(opts, cache);
  EXPECT_EQ(fs::path(first).parent_path(), fs::path(cache));
  EXPECT_TRUE(fs::exists(fs::path(cache) / (prepare_cache_key(opts) + ".report.txt")));
  const auto written = fs::last_write_time(first);
  EXPECT_EQ(prepare_cached(opts, cache), first);
  EXPECT_EQ(fs::last_write_time(first), written);  // reused, not rewritten

  PrepareOptions other_threads = opts;
  other_threads.threads = 3;
  EXPECT_EQ(prepare_cache_key(other_threads), prepare_cache_key(opts));
  PrepareOptions other_seed = opts;
  other_seed.seed = 1;
  EXPECT_NE(prepare_cache_key(other_seed), prepare_cache_key(opts));
  PrepareOptions other_len = opts;
  other_len.seq_len = 32;
  EXPECT_NE(prepare_cache_key(other_len), prepare_cache_key(opts));
  write("cache.jsonl", "{\"text\": \"abcd\"}\n");
  EXPECT_NE(prepare_cache_key(opts), fs::path(first).stem().string());

  // A damaged cache file is prepared again.
  const std::string damaged = prepare_cached(opts, cache);
  std::ofstream(damaged, std::ios::trunc) << "garbage";
  EXPECT_EQ(prepare_cached(opts, cache), damaged);
  EXPECT_EQ(TokenFile(damaged).size(), 16u);
}

TEST_F(PrepareTest, PackedFileRecordsWhereEachExampleBegins) {
  // 4 + 6 + 3 tokens with separators share one sequence of 16.
  const PrepareOptions opts = options(
      write("text.jsonl", "{\"text\": \"abc\"}\n{\"text\": \"defgh\"}\n{\"text\": \"ij\"}\n"));
  EXPECT_EQ(prepare_dataset(opts).packing_mode, "documents");
  const TokenFile file(opts.out_path);
  EXPECT_EQ(file.version(), kTokenFileVersionDocuments);
  ASSERT_EQ(file.document_starts().size(), 3u);
  EXPECT_EQ(file.document_starts()[0], 0u);
  for (const uint64_t start : file.document_starts()) {
    EXPECT_EQ(file.loss_mask()[start], 0) << "first token of the example at " << start;
  }
  const auto documents =
      open_dataset(opts.out_path, DataFormat::kTokens, 16, 0, PackingMode::kDocuments);
  ASSERT_EQ(documents->size(), 1u);
  EXPECT_EQ(documents->get(0).document_starts.size(), 2u);
  const auto stream =
      open_dataset(opts.out_path, DataFormat::kTokens, 16, 0, PackingMode::kConcatenate);
  EXPECT_TRUE(stream->get(0).document_starts.empty());
}

TEST_F(PrepareTest, PackingNonePutsOneExampleInEachSequence) {
  PrepareOptions opts = options(
      write("text.jsonl", "{\"text\": \"abc\"}\n{\"text\": \"defgh\"}\n{\"text\": \"ij\"}\n"));
  opts.packing = PackingMode::kNone;
  const PrepareReport report = prepare_dataset(opts);
  EXPECT_EQ(report.packing.sequences, 3u);
  EXPECT_EQ(report.packing.padding_tokens, 3u * 16 - 13);
  EXPECT_NE(format_report(report).find("packing none"), std::string::npos);
  const TokenFile file(opts.out_path);
  EXPECT_EQ(std::vector<uint64_t>(file.document_starts().begin(), file.document_starts().end()),
            (std::vector<uint64_t>{0, 16, 32}));
  EXPECT_EQ(open_dataset(opts.out_path, DataFormat::kTokens, 16, 0, PackingMode::kNone)->size(),
            3u);
}

TEST_F(PrepareTest, PackingNoneWithALongExampleNamesTheLine) {
  const std::string data =
      write("long.jsonl", "{\"text\": \"ab\"}\n{\"text\": \"" + std::string(40, 'a') + "\"}\n");
  PrepareOptions opts = options(data);
  opts.packing = PackingMode::kNone;
  const std::string message = error_of(opts);
  EXPECT_EQ(message.rfind(data + ":2: the example is 41 tokens (with its separator), longer than "
                                 "seq_len 16",
                          0),
            0u)
      << message;
  EXPECT_NE(message.find("--overlong truncate|drop"), std::string::npos) << message;
  EXPECT_FALSE(fs::exists(opts.out_path)) << "nothing written";
  opts.overlong = OverlongPolicy::kTruncate;
  EXPECT_EQ(prepare_dataset(opts).packing.sequences, 2u);
  opts.overlong = OverlongPolicy::kDrop;
  EXPECT_EQ(prepare_dataset(opts).packing.sequences, 1u);
}

TEST_F(PrepareTest, CacheKeySharesDocumentsAndConcatenateButNotNone) {
  PrepareOptions documents = options(write("cache.jsonl", "{\"text\": \"abc\"}\n"));
  PrepareOptions concatenate = documents;
  concatenate.packing = PackingMode::kConcatenate;
  PrepareOptions none = documents;
  none.packing = PackingMode::kNone;
  EXPECT_EQ(prepare_cache_key(documents), prepare_cache_key(concatenate));
  EXPECT_NE(prepare_cache_key(documents), prepare_cache_key(none));
}

TEST(SamplerState, SaveAndRestoreResumesExactly) {
  ShuffleSampler sampler(10, 42, 1, 2);
  for (int i = 0; i < 7; ++i) sampler.next();
  const SamplerState saved = sampler.state();
  EXPECT_EQ(saved, (SamplerState{1, 2, 42, 10, 2}));  // 5 per epoch: epoch 1, index 2
  std::vector<size_t> expected;
  for (int i = 0; i < 6; ++i) expected.push_back(sampler.next());

  ShuffleSampler resumed(10, 42, 1, 2);
  resumed.restore(saved);
  std::vector<size_t> actual;
  for (int i = 0; i < 6; ++i) actual.push_back(resumed.next());
  EXPECT_EQ(actual, expected);

  ShuffleSampler other_data(12, 42, 1, 2);
  try {
    other_data.restore(saved);
    FAIL() << "restoring onto another dataset size must fail";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("dataset size 10 but this run has 12"),
              std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace shardtrain
