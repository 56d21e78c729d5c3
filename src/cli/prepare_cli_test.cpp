// End-to-end tests of `shardtrain prepare` and `shardtrain tokenize` (the binary): every format
// with the tiny hand-written tokenizer and, when tests/tokenizer/files holds them
// (tools/tokenizer/fetch_tokenizers.sh), the real Qwen3 tokenizer; every bad input must end in
// exit code 2 with one error line naming FILE:LINE.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "data/testing/real_tokenizers.h"
#include "data/testing/tiny_tokenizer.h"
#include "data/token_file.h"
#include "data/tokenizer/tokenizer.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::kBinary;

using Result = shardtrain::testing::CommandResult;

Result run(const std::string& args) {
  return shardtrain::testing::run_command(kBinary + " " + args);
}

const char* const kText = "{\"text\": \"The quick brown fox jumps over the lazy dog.\"}\n";
const char* const kPromptCompletion = "{\"prompt\": \"2+2=\", \"completion\": \" 4\"}\n";
const char* const kAlpaca =
    "{\"instruction\": \"Add the numbers.\", \"input\": \"2 and 2\", \"output\": \"4\"}\n";
const char* const kChat =
    "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", "
    "\"content\": \"Hi!\"}, {\"role\": \"assistant\", \"content\": \"Hello.\"}]}\n";

class PrepareCliTest : public testing::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    tiny_ = testing::write_tiny_tokenizer(dir_ / "tiny");
  }

  // Runs prepare on `lines` (repeated `copies` times) and checks success and the token file.
  void expect_prepares(const std::string& tokenizer, const std::string& name,
                       const std::string& lines, const std::string& format) {
    std::string data;
    for (int i = 0; i < 20; ++i) data += lines;
    const std::string in = write(name + ".jsonl", data);
    const std::string out = path(name + ".bin");
    const Result result = run("prepare --tokenizer " + tokenizer + " --data " + in + " --out " +
                              out + " --seq-len 64 --threads 2");
    ASSERT_EQ(result.exit_code, 0) << result.output;
    EXPECT_NE(result.output.find("format " + format), std::string::npos) << result.output;
    EXPECT_NE(result.output.find("examples 20"), std::string::npos) << result.output;
    const TokenFile file(out);
    EXPECT_EQ(file.size() % 64, 0u);
    EXPECT_TRUE(file.has_loss_mask());
  }
  // A bad input must exit 2 with exactly one error line that contains `expected`.
  void expect_bad(const std::string& args, const std::string& expected) {
    const Result result = run(args);
    EXPECT_EQ(result.exit_code, 2) << result.output;
    const std::vector<std::string> errors = result.error_lines();
    ASSERT_EQ(errors.size(), 1u) << result.output;
    EXPECT_NE(errors[0].find(expected), std::string::npos) << errors[0];
  }
  std::string prepare_args(const std::string& data) const {
    return "prepare --tokenizer " + tiny_ + " --data " + data + " --out " + path("out.bin");
  }

  std::string tiny_;
};

TEST_F(PrepareCliTest, EveryFormatWithTheTinyTokenizer) {
  expect_prepares(tiny_, "text", kText, "text");
  expect_prepares(tiny_, "pc", kPromptCompletion, "prompt_completion");
  expect_prepares(tiny_, "alpaca", kAlpaca, "alpaca");
  expect_prepares(tiny_, "chat", kChat, "chat (template the model's own, from ");
}

TEST_F(PrepareCliTest, EveryFormatWithTheRealQwen3Tokenizer) {
  const fs::path qwen = testing::real_tokenizer_dir("qwen3");
  if (!fs::exists(qwen / "tokenizer.json")) {
    GTEST_SKIP() << (qwen / "tokenizer.json").string()
                 << " is absent; run tools/tokenizer/fetch_tokenizers.sh to enable this test";
  }
  expect_prepares(qwen.string(), "text", kText, "text");
  expect_prepares(qwen.string(), "pc", kPromptCompletion, "prompt_completion");
  expect_prepares(qwen.string(), "alpaca", kAlpaca, "alpaca");
  expect_prepares(qwen.string(), "chat", kChat, "chat (template the model's own, from ");
}

TEST_F(PrepareCliTest, ExplicitOptionsAndSkipping) {
  const std::string data = write("mixed.jsonl", std::string(kChat) + "oops\n" + kChat);
  const Result result = run(prepare_args(data) +
                            " --format chat --chat-template llama3 --on-bad-line skip "
                            "--train-on-prompt --seed 3 --overlong drop");
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_NE(result.output.find("template built-in llama3"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("skipped lines 1"), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("skipped " + data + ":2: not valid JSON"), std::string::npos)
      << result.output;
}

TEST_F(PrepareCliTest, BadInputsExitTwoNamingFileAndLine) {
  const std::string ok = kText;
  const std::string not_json = write("not_json.jsonl", ok + "{oops\n");
  expect_bad(prepare_args(not_json), not_json + ":2: not valid JSON");
  const std::string missing = write("missing.jsonl", ok + "{\"txt\": \"a\"}\n");
  expect_bad(prepare_args(missing), missing + ":2: missing \"text\"");
  const std::string wrong_type = write("wrong_type.jsonl", ok + "{\"text\": [1]}\n");
  expect_bad(prepare_args(wrong_type), wrong_type + ":2: \"text\" must be a string, got array");
  const std::string empty_text = write("empty_text.jsonl", ok + ok + "{\"text\": \"\"}\n");
  expect_bad(prepare_args(empty_text), empty_text + ":3: \"text\" is empty");
  const std::string bad_utf8 = write("bad_utf8.jsonl", ok + "{\"text\": \"caf\xe9\"}\n");
  expect_bad(prepare_args(bad_utf8), bad_utf8 + ":2: invalid UTF-8");
  const std::string role =
      write("role.jsonl", std::string(kChat) +
                              "{\"messages\": [{\"role\": \"narrator\", \"content\": \"a\"}]}\n");
  expect_bad(prepare_args(role) + " --chat-template chatml",
             role + ":2: messages[0] has unknown role \"narrator\"");
  // The model's own template renders any role; the line then has nothing to train.
  expect_bad(prepare_args(role), role + ":2: the chat has no assistant reply");
  // Chat data read as text: the hint is the format, not skipping every line.
  const std::string chat_as_text = write("chat_as_text.jsonl", kChat);
  expect_bad(prepare_args(chat_as_text) + " --format text",
             "set data.example_format = \"chat\" (prepare: --format chat)");
  const std::string none = write("none.jsonl", "{\"text\": \" \"}\n{\"text\": null}\n");
  expect_bad(prepare_args(none) + " --on-bad-line skip", none + ": no usable example");

  nlohmann::json unigram = testing::tiny_tokenizer_json();
  unigram["model"]["type"] = "Unigram";
  const std::string unigram_path = write("unigram.json", unigram.dump());
  expect_bad(
      "prepare --tokenizer " + unigram_path + " --data " + not_json + " --out " + path("x.bin"),
      unigram_path);
  EXPECT_FALSE(fs::exists(path("out.bin")));  // nothing was written by any failed run

  // --invalid-utf8 replace accepts the line that failed above.
  const Result replaced = run(prepare_args(bad_utf8) + " --invalid-utf8 replace");
  EXPECT_EQ(replaced.exit_code, 0) << replaced.output;
}

TEST_F(PrepareCliTest, HostileSizesAndOutputsExitTwo) {
  const std::string data = write("data.jsonl", kText);
  // Was an allocation of 10^11 tokens ("out of memory") and an abort creating 10^5 threads.
  expect_bad(prepare_args(data) + " --seq-len 100000000000", "seq_len is 100000000000");
  expect_bad(prepare_args(data) + " --threads 100000", "threads is 100000; use 0 (all cores) or");
  // An output that is a FIFO or a directory is left as it is (the atomic rename replaced them).
  const std::string fifo = path("out.fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  expect_bad("prepare --tokenizer " + tiny_ + " --data " + data + " --out " + fifo,
             fifo + " exists and is a FIFO");
  EXPECT_TRUE(fs::is_fifo(fifo));
  fs::create_directory(path("out_dir"));
  expect_bad("prepare --tokenizer " + tiny_ + " --data " + data + " --out " + path("out_dir"),
             path("out_dir") + " exists and is a directory");
  EXPECT_TRUE(fs::is_directory(path("out_dir")));
}

TEST_F(PrepareCliTest, TokenizeWritesOneArrayPerLine) {
  const std::string in = write("in.jsonl", "{\"text\": \"hi\"}\n{\"text\": \"<|im_end|>a\"}\n");
  const Result result = run("tokenize --tokenizer " + tiny_ + " < " + in);
  ASSERT_EQ(result.exit_code, 0) << result.output;
  EXPECT_EQ(result.output,
            "[104,105]\n[" + std::to_string(testing::tiny_special_id("<|im_end|>")) + ",97]\n");

  const std::string bad = write("bad.jsonl", "{\"text\": \"hi\"}\n{\"body\": \"x\"}\n");
  expect_bad("tokenize --tokenizer " + tiny_ + " < " + bad, "stdin:2:");
}

TEST_F(PrepareCliTest, TokenizeMatchesTheLibraryOnRealFiles) {
  const fs::path llama2 = testing::real_tokenizer_dir("llama2");
  if (!fs::exists(llama2 / "tokenizer.json")) {
    GTEST_SKIP() << (llama2 / "tokenizer.json").string()
                 << " is absent; run tools/tokenizer/fetch_tokenizers.sh to enable this test";
  }
  const Tokenizer tokenizer = Tokenizer::load((llama2 / "tokenizer.json").string());
  const std::string in = write("in.jsonl", "{\"text\": \"Hello world\"}\n");
  const auto expected = [&](bool special) {
    return nlohmann::json(tokenizer.encode("Hello world", special)).dump() + "\n";
  };
  EXPECT_EQ(run("tokenize --tokenizer " + llama2.string() + " < " + in).output, expected(false));
  EXPECT_EQ(run("tokenize --tokenizer " + (llama2 / "tokenizer.json").string() +
                " --add-special-tokens < " + in)
                .output,
            expected(true));
  EXPECT_NE(expected(true), expected(false));  // llama2 adds <s>
}

}  // namespace
}  // namespace shardtrain
