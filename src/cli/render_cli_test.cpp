// End-to-end tests of `shardtrain render` (the binary): the stdout of the committed conversation
// corpus through the real Qwen3 and Llama 3.1 templates equals transformers' goldens
// (tests/chat_template/goldens, see data/hf_chat_template_golden_test.cpp) byte for byte, and
// every bad input ends in exit code 2 with one line naming the template file, the template
// line/column and the conversation line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/testing/test_support.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::kBinary;
const fs::path kRoot = fs::path(SHARDTRAIN_SOURCE_DIR) / "tests" / "chat_template";

shardtrain::testing::CommandResult run(const std::string& args) {
  return shardtrain::testing::run_command(kBinary + " " + args);
}

// The golden stdout: one JSON string per conversation line.
std::string golden_stdout(const std::string& name, bool generation_prompt) {
  std::ifstream in(kRoot / "goldens" / (name + ".jsonl"));
  std::string out;
  for (std::string line; std::getline(in, line);) {
    const auto golden = nlohmann::ordered_json::parse(line);
    if (golden["add_generation_prompt"].get<bool>() != generation_prompt) continue;
    EXPECT_FALSE(golden.contains("error")) << name << " refuses a corpus conversation";
    out += nlohmann::ordered_json(golden["text"].get<std::string>()).dump() + "\n";
  }
  return out;
}

TEST(RenderCli, StdoutEqualsTransformersGoldens) {
  const std::string conversations = (kRoot / "conversations.jsonl").string();
  for (const std::string name : {"qwen3", "llama3_1", "deepseek_v3"}) {
    const std::string dir = (kRoot / "templates" / name).string();
    for (const bool generation_prompt : {false, true}) {
      const auto result =
          run("render --tokenizer " + dir + (generation_prompt ? " --add-generation-prompt" : "") +
              " < " + conversations);
      ASSERT_EQ(result.exit_code, 0) << result.output;
      EXPECT_EQ(result.output, golden_stdout(name, generation_prompt)) << name;
    }
  }
}

class RenderCliErrors : public testing::TempDirTest {
 protected:
  void write_template(const std::string& source) {
    std::ofstream(dir_ / "tokenizer_config.json")
        << nlohmann::json{{"chat_template", source}}.dump();
  }
  shardtrain::testing::CommandResult render(const std::string& input) {
    std::ofstream(dir_ / "in.jsonl") << input;
    return run("render --tokenizer " + dir_.string() + " < " + (dir_ / "in.jsonl").string());
  }
};

TEST_F(RenderCliErrors, RaiseExceptionNamesFileLineColumnAndConversation) {
  write_template(
      "{% for m in messages %}\n{% if m.role == 'tool' %}\n  {{ raise_exception('no tool role') "
      "}}\n{% endif %}{{ m.content }}{% endfor %}");
  const auto result = render(
      "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}]}\n\n"
      "{\"messages\": [{\"role\": \"tool\", \"content\": \"b\"}]}\n");
  EXPECT_EQ(result.exit_code, 2);
  const auto errors = result.error_lines();
  ASSERT_EQ(errors.size(), 1u) << result.output;
  EXPECT_NE(errors[0].find((dir_ / "tokenizer_config.json").string() +
                           ": line 3, column 6: the template raised an exception: no tool role "
                           "(conversation at stdin:3)"),
            std::string::npos)
      << errors[0];
  EXPECT_EQ(result.lines()[0], "\"a\"");  // the good line before it was rendered
}

TEST_F(RenderCliErrors, SyntaxErrorUnsupportedConstructAndBadLines) {
  write_template("{% if messages %}\n{{ messages[0].content }");
  auto result = render("{\"messages\": []}\n");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("tokenizer_config.json: line 2, column"), std::string::npos)
      << result.output;

  write_template("{% include 'other.jinja' %}");
  result = render("{\"messages\": []}\n");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("line 1, column 4: \"{% include %}\" is not supported"),
            std::string::npos)
      << result.output;

  write_template("{{ messages | length }}");
  result = render("{\"messages\": [1]}\nnot json\n");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("stdin:2: not valid JSON"), std::string::npos) << result.output;
  result = render("{\"prompt\": \"x\"}\n");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("stdin:1: expected {\"messages\""), std::string::npos)
      << result.output;

  fs::remove(dir_ / "tokenizer_config.json");
  result = render("{\"messages\": []}\n");
  EXPECT_EQ(result.exit_code, 2);
  EXPECT_NE(result.output.find("has no chat_template"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace shardtrain
