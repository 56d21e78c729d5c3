// A run's exported model works from anywhere and chats as it was trained: checkpoints record
// absolute paths (a run started with relative paths exports from another directory, tokenizer
// included), `export --tokenizer DIR` takes the tokenizer from DIR, the built-in template the
// run trained with is written as chat_template.jinja (by train and by export), and
// `generate --chat --system` renders the conversation with it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/testing/test_support.h"
#include "data/builtin_chat_jinja.h"
#include "data/testing/tiny_tokenizer.h"

namespace {

namespace fs = std::filesystem;
using Result = shardtrain::testing::CommandResult;
using shardtrain::testing::kBinary;

using shardtrain::testing::read_text;

class ExportCliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("shardtrain_export_cli_" + std::to_string(::getpid()));
    fs::create_directories(dir_ / "work" / "model");
    fs::create_directories(dir_ / "elsewhere");
    // The demo config (vocab 260) and the tiny tokenizer without a chat template of its own.
    fs::copy_file(std::string(SHARDTRAIN_SOURCE_DIR) + "/examples/demo-model/config.json",
                  dir_ / "work" / "model" / "config.json");
    shardtrain::testing::write_tiny_tokenizer(dir_ / "work" / "model");
    std::ofstream(dir_ / "work" / "model" / "tokenizer_config.json")
        << R"({"eos_token": "<|endoftext|>", "model_max_length": 512})";
    std::ofstream chats(dir_ / "work" / "chat.jsonl");
    for (int i = 0; i < 16; ++i) {
      chats << nlohmann::json{{"messages",
                               {{{"role", "user"}, {"content", "hi " + std::to_string(i)}},
                                {{"role", "assistant"}, {"content", "hello"}}}}}
                   .dump()
            << "\n";
    }
  }
  void TearDown() override { fs::remove_all(dir_); }

  Result run_in(const std::string& cwd, const std::string& args) {
    return shardtrain::testing::run_command("cd " + (dir_ / cwd).string() + " && " + kBinary + " " +
                                            args);
  }

  fs::path dir_;
};

TEST_F(ExportCliTest, RelativeRunExportsFromElsewhereWithItsTemplateAndChats) {
  Result train = run_in("work",
                        "train --model.path model --model.init random --data.path chat.jsonl "
                        "--data.chat_template chatml --data.seq_len 32 --data.cache_dir cache "
                        "--train.steps 2 --train.micro_batch 2 --train.device cpu "
                        "--train.checkpoint_dir ckpt --train.output_dir out");
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const std::string chatml = shardtrain::builtin_chat_template_jinja(
      shardtrain::ChatTemplate::kChatml, shardtrain::ChatTokens{});
  EXPECT_EQ(read_text(dir_ / "work" / "out" / "chat_template.jinja"), chatml);

  const std::string checkpoint = (dir_ / "work" / "ckpt").string();
  Result exported = run_in("elsewhere", "export " + checkpoint + " --out exported");
  ASSERT_EQ(exported.exit_code, 0) << exported.output;
  EXPECT_NE(exported.output.find("with tokenizer files"), std::string::npos) << exported.output;
  EXPECT_EQ(read_text(dir_ / "elsewhere" / "exported" / "tokenizer.json"),
            read_text(dir_ / "work" / "model" / "tokenizer.json"));
  EXPECT_EQ(read_text(dir_ / "elsewhere" / "exported" / "chat_template.jinja"), chatml);

  // --tokenizer DIR: that dir's files instead of the run's.
  shardtrain::testing::write_tiny_tokenizer(dir_ / "other");
  Result other = run_in("elsewhere", "export " + checkpoint + " --out exported2 --tokenizer " +
                                         (dir_ / "other").string());
  ASSERT_EQ(other.exit_code, 0) << other.output;
  EXPECT_EQ(read_text(dir_ / "elsewhere" / "exported2" / "tokenizer_config.json"),
            read_text(dir_ / "other" / "tokenizer_config.json"));
  const std::string missing = (dir_ / "no_such_dir").string();
  Result bad =
      run_in("elsewhere", "export " + checkpoint + " --out exported3 --tokenizer " + missing);
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  ASSERT_EQ(bad.error_lines().size(), 1u) << bad.output;
  EXPECT_NE(bad.error_lines()[0].find(missing), std::string::npos) << bad.output;

  // generate --chat renders [system, user] with the exported template and a generation prompt.
  const std::string model = (dir_ / "elsewhere" / "exported").string();
  Result chat = run_in("elsewhere", "generate --model " + model +
                                        " --chat --system \"Be brief.\" --prompt Hi "
                                        "--max-new-tokens 3 --device cpu");
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  const std::string rendered =
      nlohmann::json(std::string("<|im_start|>system\nBe brief.<|im_end|>\n"
                                 "<|im_start|>user\nHi<|im_end|>\n"
                                 "<|im_start|>assistant\n"))
          .dump();
  EXPECT_NE(chat.output.find(rendered), std::string::npos) << chat.output;
  EXPECT_EQ(chat.lines().back().find("Hi"), std::string::npos) << "--chat prints the reply only:\n"
                                                               << chat.output;

  // Without a template, --chat is one error line naming the dir; --system needs --chat.
  fs::remove(dir_ / "elsewhere" / "exported" / "chat_template.jinja");
  Result no_template =
      run_in("elsewhere", "generate --model " + model + " --chat --prompt Hi --device cpu");
  EXPECT_EQ(no_template.exit_code, 2) << no_template.output;
  ASSERT_EQ(no_template.error_lines().size(), 1u) << no_template.output;
  EXPECT_NE(no_template.error_lines()[0].find("has no chat template"), std::string::npos);
  Result system_alone =
      run_in("elsewhere", "generate --model " + model + " --system S --prompt Hi --device cpu");
  EXPECT_EQ(system_alone.exit_code, 2) << system_alone.output;
}

}  // namespace
