// Tests of example formats, chat templates and loss masks (data/formats.h, chat_template.h,
// rendered_document.h). Expected strings are written by hand from each template's definition.
// Real-tokenizer tests use tests/tokenizer/files (tools/tokenizer/fetch_tokenizers.sh) and are
// skipped with a message when those files are absent.
#include "data/formats.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "data/chat_template.h"
#include "data/rendered_document.h"
#include "data/testing/real_tokenizers.h"
#include "data/testing/tiny_tokenizer.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer_files.h"

namespace shardtrain {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;

const Tokenizer& tiny() {
  static const Tokenizer tokenizer =
      Tokenizer::from_json_text(testing::tiny_tokenizer_json().dump(), "tiny.json");
  return tokenizer;
}

// The decoded text of the tokens whose mask is `trained` (specials kept).
std::string text_with_mask(const Tokenizer& tokenizer, const TokenizedDocument& document,
                           uint8_t trained) {
  std::vector<int32_t> ids;
  for (size_t i = 0; i < document.ids.size(); ++i) {
    if (document.mask[i] == trained) ids.push_back(document.ids[i]);
  }
  return tokenizer.decode(ids, /*skip_special_tokens=*/false);
}

const std::vector<ChatMessage> kConversation = {
    {"system", "You are helpful."}, {"user", "Hi"}, {"assistant", "Hello!"}};

ChatTokens tokens_for(ChatTemplate chat_template) {
  return chat_tokens(chat_template, TokenizerFiles{});
}

TEST(ChatTemplate, ChatmlRendersImStartBlocks) {
  const RenderedDocument document =
      render_chat(ChatTemplate::kChatml, tokens_for(ChatTemplate::kChatml), kConversation, false);
  EXPECT_EQ(rendered_text(document),
            "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n"
            "<|im_start|>assistant\nHello!<|im_end|>\n");
  EXPECT_FALSE(document.separator_trained);
}

TEST(ChatTemplate, Llama3RendersHeadersAndTrims) {
  std::vector<ChatMessage> messages = kConversation;
  messages[1].content = " Hi \n";
  const RenderedDocument document =
      render_chat(ChatTemplate::kLlama3, tokens_for(ChatTemplate::kLlama3), messages, false);
  EXPECT_EQ(rendered_text(document),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are "
            "helpful.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>");
}

TEST(ChatTemplate, Llama2RendersInstAndSysBlocks) {
  const std::vector<ChatMessage> messages = {{"system", "Be brief."},
                                             {"user", "Hi"},
                                             {"assistant", "Hello!"},
                                             {"user", " Bye "},
                                             {"assistant", "Goodbye."}};
  const RenderedDocument document =
      render_chat(ChatTemplate::kLlama2, tokens_for(ChatTemplate::kLlama2), messages, false);
  EXPECT_EQ(rendered_text(document),
            "<s>[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nHi [/INST] Hello! </s>"
            "<s>[INST] Bye [/INST] Goodbye. </s>");
  // Without a system message the first turn has no <<SYS>> block.
  const RenderedDocument plain =
      render_chat(ChatTemplate::kLlama2, tokens_for(ChatTemplate::kLlama2),
                  {{"user", "Hi"}, {"assistant", "Hello!"}}, false);
  EXPECT_EQ(rendered_text(plain), "<s>[INST] Hi [/INST] Hello! </s>");
}

TEST(ChatTemplate, BosAndEosComeFromTokenizerConfig) {
  TokenizerFiles files;
  files.bos_token = "<BOS>";
  files.eos_token = "<EOS>";
  const RenderedDocument document =
      render_chat(ChatTemplate::kLlama2, chat_tokens(ChatTemplate::kLlama2, files),
                  {{"user", "a"}, {"assistant", "b"}}, false);
  EXPECT_EQ(rendered_text(document), "<BOS>[INST] a [/INST] b <EOS>");
}

TEST(ChatTemplate, BadConversationsAreRejected) {
  const ChatTokens tokens = tokens_for(ChatTemplate::kChatml);
  EXPECT_NE(error_of([&] {
              render_chat(ChatTemplate::kChatml, tokens, {{"user", "a"}, {"bot", "b"}}, false);
            }).find("messages[1] has unknown role \"bot\""),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              render_chat(ChatTemplate::kChatml, tokens, {{"user", "a"}}, false);
            }).find("no assistant message"),
            std::string::npos);
  EXPECT_EQ(error_of([&] {
              render_chat(ChatTemplate::kChatml, tokens, {{"user", "a"}}, true);
            }),
            "");
  EXPECT_NE(error_of([&] {
              render_chat(ChatTemplate::kLlama2, tokens_for(ChatTemplate::kLlama2),
                          {{"user", "a"}, {"user", "b"}, {"assistant", "c"}}, false);
            }).find("alternating"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              render_chat(ChatTemplate::kChatml, tokens, {}, false);
            }).find("\"messages\" is empty"),
            std::string::npos);
}

TEST(ChatTemplate, DetectionFromConfigSourceThenTokens) {
  const auto no_tokens = [](const char*) { return false; };
  TokenizerFiles files;
  files.chat_template = "{{ '<|im_start|>' + message['role'] }}";
  EXPECT_EQ(detect_chat_template(files, no_tokens), ChatTemplate::kChatml);
  files.chat_template = "{{ '<|start_header_id|>' }}";
  EXPECT_EQ(detect_chat_template(files, no_tokens), ChatTemplate::kLlama3);
  files.chat_template = "{{ bos_token + '[INST] ' }}";
  EXPECT_EQ(detect_chat_template(files, no_tokens), ChatTemplate::kLlama2);
  files.chat_template = "";
  EXPECT_EQ(detect_chat_template(files, no_tokens), ChatTemplate::kLlama2);
  EXPECT_EQ(detect_chat_template(
                files, [](const char* token) { return std::string(token) == "<|im_start|>"; }),
            ChatTemplate::kChatml);
  EXPECT_EQ(
      detect_chat_template(
          files, [](const char* token) { return std::string(token) == "<|start_header_id|>"; }),
      ChatTemplate::kLlama3);
}

TEST(Formats, DetectFromKeys) {
  EXPECT_EQ(detect_format(json{{"text", "a"}}), ExampleFormat::kText);
  EXPECT_EQ(detect_format(json{{"prompt", "a"}, {"completion", "b"}}),
            ExampleFormat::kPromptCompletion);
  EXPECT_EQ(detect_format(json{{"instruction", "a"}, {"output", "b"}}), ExampleFormat::kAlpaca);
  EXPECT_EQ(detect_format(json{{"messages", json::array()}}), ExampleFormat::kChat);
  EXPECT_EQ(detect_format(json{{"prompt", "a"}}), std::nullopt);
  EXPECT_EQ(detect_format(json::array()), std::nullopt);
}

TEST(Formats, AlpacaPromptWithAndWithoutInput) {
  EXPECT_EQ(alpaca_prompt("Add.", "1 and 2"),
            "Below is an instruction that describes a task, paired with an input that provides "
            "further context. Write a response that appropriately completes the request.\n\n"
            "### Instruction:\nAdd.\n\n### Input:\n1 and 2\n\n### Response:\n");
  EXPECT_EQ(alpaca_prompt("Say hi.", ""),
            "Below is an instruction that describes a task. Write a response that appropriately "
            "completes the request.\n\n### Instruction:\nSay hi.\n\n### Response:\n");
  RenderSettings settings;
  settings.format = ExampleFormat::kAlpaca;
  const RenderedDocument document =
      render_record(json{{"instruction", "Say hi."}, {"output", "hi"}}, settings);
  EXPECT_EQ(rendered_text(document), alpaca_prompt("Say hi.", "") + "hi");
  const TokenizedDocument tokens = tokenize_document(tiny(), document);
  EXPECT_EQ(text_with_mask(tiny(), tokens, 1), "hi");
  EXPECT_TRUE(tokens.separator_trained);
}

TEST(Formats, TextTrainsEveryTokenButTheFirst) {
  RenderSettings settings;
  const TokenizedDocument document =
      tokenize_document(tiny(), render_record(json{{"text", "abc"}}, settings));
  EXPECT_EQ(document.ids, (std::vector<int32_t>{'a', 'b', 'c'}));
  EXPECT_EQ(document.mask, (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_TRUE(document.separator_trained);
}

TEST(Formats, PromptCompletionMasksThePrompt) {
  RenderSettings settings;
  settings.format = ExampleFormat::kPromptCompletion;
  const json record = {{"prompt", "Q: 1+1="}, {"completion", " 2"}};
  const TokenizedDocument document = tokenize_document(tiny(), render_record(record, settings));
  EXPECT_EQ(document.mask, (std::vector<uint8_t>{0, 0, 0, 0, 0, 0, 0, 1, 1}));
  EXPECT_EQ(text_with_mask(tiny(), document, 1), " 2");
  settings.train_on_prompt = true;
  const TokenizedDocument all = tokenize_document(tiny(), render_record(record, settings));
  EXPECT_EQ(all.mask, (std::vector<uint8_t>{0, 1, 1, 1, 1, 1, 1, 1, 1}));
}

TEST(Formats, ChatMasksAllButAssistantReplies) {
  RenderSettings settings;
  settings.format = ExampleFormat::kChat;
  const json record = {{"messages",
                        {{{"role", "user"}, {"content", "Hi"}},
                         {{"role", "assistant"}, {"content", "Yo"}},
                         {{"role", "user"}, {"content", "Bye"}},
                         {{"role", "assistant"}, {"content", "Ciao"}}}}};
  const std::map<ChatTemplate, std::string> expected_trained = {
      {ChatTemplate::kChatml, "Yo<|im_end|>Ciao<|im_end|>"},
      {ChatTemplate::kLlama3, "Yo<|eot_id|>Ciao<|eot_id|>"},
      {ChatTemplate::kLlama2, " Yo </s> Ciao </s>"}};
  for (const auto& [chat_template, trained] : expected_trained) {
    settings.chat_template = chat_template;
    settings.chat_tokens = tokens_for(chat_template);
    const RenderedDocument rendered = render_record(record, settings);
    const TokenizedDocument document = tokenize_document(tiny(), rendered);
    EXPECT_EQ(text_with_mask(tiny(), document, 1), trained) << chat_template_name(chat_template);
    EXPECT_EQ(document.mask[0], 0);
    // Every token is accounted for: the ids are the rendered string's.
    EXPECT_EQ(tiny().decode(document.ids, false), rendered_text(rendered));
  }
  settings.chat_template = ChatTemplate::kChatml;
  settings.train_on_prompt = true;
  const TokenizedDocument all = tokenize_document(tiny(), render_record(record, settings));
  EXPECT_EQ(text_with_mask(tiny(), all, 0), "<|im_start|>");
}

TEST(Formats, BadRecordsSayWhatIsWrong) {
  RenderSettings text;
  RenderSettings completion;
  completion.format = ExampleFormat::kPromptCompletion;
  RenderSettings alpaca;
  alpaca.format = ExampleFormat::kAlpaca;
  RenderSettings chat;
  chat.format = ExampleFormat::kChat;
  const auto message = [](const json& record, const RenderSettings& settings) {
    return error_of([&] { render_record(record, settings); });
  };
  EXPECT_NE(message(json{{"txt", "a"}}, text).find("missing \"text\""), std::string::npos);
  EXPECT_NE(message(json{{"text", 3}}, text).find("\"text\" must be a string, got number"),
            std::string::npos);
  EXPECT_NE(message(json{{"text", "  \n"}}, text).find("\"text\" is empty"), std::string::npos);
  EXPECT_NE(message(json::array({1}), text).find("expected a JSON object"), std::string::npos);
  EXPECT_NE(message(json{{"prompt", "a"}, {"completion", ""}}, completion)
                .find("\"completion\" is empty"),
            std::string::npos);
  EXPECT_NE(message(json{{"instruction", "a"}}, alpaca).find("missing \"output\""),
            std::string::npos);
  EXPECT_NE(message(json{{"instruction", "a"}, {"input", 5}, {"output", "b"}}, alpaca)
                .find("\"input\" must be a string"),
            std::string::npos);
  EXPECT_NE(message(json{{"messages", "hi"}}, chat).find("\"messages\" must be an array"),
            std::string::npos);
  EXPECT_NE(message(json{{"messages", {{{"role", "user"}}}}}, chat)
                .find("messages[0]: missing \"content\""),
            std::string::npos);
  EXPECT_NE(
      message(
          json{{"messages",
                {{{"role", "user"}, {"content", "a"}}, {{"role", "wizard"}, {"content", "b"}}}}},
          chat)
          .find("unknown role \"wizard\""),
      std::string::npos);
}

TEST(RenderedDocument, MissingSpecialTokenNamesIt) {
  const Tokenizer no_specials = Tokenizer::from_json_text(
      [] {
        json config = testing::tiny_tokenizer_json();
        config["added_tokens"] = json::array();
        return config.dump();
      }(),
      "plain.json");
  const RenderedDocument document =
      render_chat(ChatTemplate::kChatml, tokens_for(ChatTemplate::kChatml),
                  {{"user", "a"}, {"assistant", "b"}}, false);
  EXPECT_NE(
      error_of([&] { tokenize_document(no_specials, document); }).find("no token \"<|im_start|>\""),
      std::string::npos);
}

// ---------------------------------------------------------------- real tokenizer files

struct RealCase {
  const char* name;
  ChatTemplate chat_template;
  const char* trained;
};

class RealChatTest : public ::testing::TestWithParam<RealCase> {};

// Tokenizing the parts equals tokenizing the whole rendered string (what HF's
// apply_chat_template(tokenize=True) does), and the mask covers exactly the replies.
TEST_P(RealChatTest, PartsTokenizeLikeTheWholeString) {
  const RealCase& c = GetParam();
  REQUIRE_REAL_TOKENIZER(tokenizer, c.name);
  const TokenizerFiles files =
      locate_tokenizer((testing::real_tokenizers_root() / c.name).string());
  EXPECT_EQ(
      detect_chat_template(
          files, [&](const char* token) { return tokenizer->token_to_id(token).has_value(); }),
      c.chat_template);
  const std::vector<ChatMessage> messages = {{"system", "You are terse."},
                                             {"user", "What is 2+2?"},
                                             {"assistant", "It is 4."},
                                             {"user", "And 3+3?"},
                                             {"assistant", "6, naturally."}};
  const RenderedDocument rendered =
      render_chat(c.chat_template, chat_tokens(c.chat_template, files), messages, false);
  const TokenizedDocument document = tokenize_document(*tokenizer, rendered);
  EXPECT_EQ(document.ids, tokenizer->encode(rendered_text(rendered), false));
  EXPECT_EQ(text_with_mask(*tokenizer, document, 1), c.trained);
}

INSTANTIATE_TEST_SUITE_P(
    Families, RealChatTest,
    ::testing::Values(
        RealCase{"qwen3", ChatTemplate::kChatml, "It is 4.<|im_end|>6, naturally.<|im_end|>"},
        RealCase{"llama3", ChatTemplate::kLlama3, "It is 4.<|eot_id|>6, naturally.<|eot_id|>"},
        // SentencePiece decoding drops the leading space of the first piece.
        RealCase{"llama2", ChatTemplate::kLlama2, "It is 4. </s> 6, naturally. </s>"}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(Formats, ShareGptConversationsAreChats) {
  const json sharegpt = json::parse(
      R"({"conversations": [{"from": "system", "value": "s"}, {"from": "human", "value": "ab"},
          {"from": "gpt", "value": "ba"}]})");
  const json openai = json::parse(
      R"({"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "ab"},
          {"role": "assistant", "content": "ba"}]})");
  EXPECT_EQ(detect_format(sharegpt), ExampleFormat::kChat);
  RenderSettings settings;
  settings.format = ExampleFormat::kChat;
  settings.chat_template = ChatTemplate::kChatml;
  const TokenizedDocument a = tokenize_document(tiny(), render_record(sharegpt, settings));
  const TokenizedDocument b = tokenize_document(tiny(), render_record(openai, settings));
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.mask, b.mask);
  EXPECT_EQ(text_with_mask(tiny(), a, 1), "ba<|im_end|>");
  const std::string error = error_of([&] {
    render_record(json::parse(R"({"conversations": [{"from": "robot", "value": "x"}]})"), settings);
  });
  EXPECT_EQ(error,
            "conversations[0] has \"from\": \"robot\", which is not supported; use human, gpt, "
            "system or tool");
}

TEST(RealTokenizers, TokenMergedAcrossTheBoundaryBelongsToTheCompletion) {
  REQUIRE_REAL_TOKENIZER(qwen, "qwen3");
  RenderSettings settings;
  settings.format = ExampleFormat::kPromptCompletion;
  const TokenizedDocument document = tokenize_document(
      *qwen, render_record(json{{"prompt", "Say: Hel"}, {"completion", "lo world"}}, settings));
  const std::vector<int32_t> joint = qwen->encode("Say: Hello world", true);
  EXPECT_EQ(document.ids, joint);
  // " Hello" straddles the boundary (the prompt alone ends in " Hel"): it is trained.
  EXPECT_EQ(text_with_mask(*qwen, document, 1), " Hello world");
}

}  // namespace
}  // namespace shardtrain
