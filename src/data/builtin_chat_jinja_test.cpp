// The built-in templates' Jinja sources render, through the chat template engine
// (data/hf_chat_template.h), exactly the text render_chat() trains on, for conversations with
// and without a system message, several turns, whitespace at the edges, quotes and unicode;
// the generation prompt is the assistant header; llama2's role order is enforced.
#include "data/builtin_chat_jinja.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "core/testing/test_support.h"
#include "data/hf_chat_template.h"

namespace shardtrain {
namespace {

using testing::error_of;

const std::vector<std::vector<ChatMessage>>& conversations() {
  static const std::vector<std::vector<ChatMessage>> all = {
      {{"user", "Hi!"}, {"assistant", "Hello."}},
      {{"system", "Be brief."}, {"user", "  2+2?\n"}, {"assistant", "\t4 "}},
      {{"user", "Quote ' and \" and \\ backslash"},
       {"assistant", "Sure: '{{ not a tag }}'"},
       {"user", "Grüße, 你好 🙂"},
       {"assistant", "\nDanke.\n\n"}},
      {{"system", ""}, {"user", ""}, {"assistant", ""}},
  };
  return all;
}

std::string render_jinja(const std::string& source, const std::vector<ChatMessage>& messages,
                         bool add_generation_prompt) {
  TokenizerFiles files;
  files.chat_template = source;
  files.chat_template_file = "builtin.jinja";
  files.named_chat_templates = {{"default", source}};
  const std::optional<HfChatTemplate> compiled = HfChatTemplate::load(files);
  EXPECT_TRUE(compiled.has_value());
  ChatRenderInput input;
  for (const ChatMessage& m : messages) {
    input.messages.push_back({{"role", m.role}, {"content", m.content}});
  }
  input.add_generation_prompt = add_generation_prompt;
  return compiled->render(input).text;
}

TEST(BuiltinChatJinja, RendersWhatRenderChatTrainsOn) {
  const ChatTokens llama2_tokens{"<s>", "</s>"};
  const ChatTokens llama3_tokens{"<|begin_of_text|>", ""};
  for (const auto& [kind, tokens] : std::vector<std::pair<ChatTemplate, ChatTokens>>{
           {ChatTemplate::kChatml, {}},
           {ChatTemplate::kLlama3, llama3_tokens},
           {ChatTemplate::kLlama2, llama2_tokens},
           {ChatTemplate::kLlama2, {"<b'o\\s>", "<e>"}}}) {
    const std::string source = builtin_chat_template_jinja(kind, tokens);
    for (size_t c = 0; c < conversations().size(); ++c) {
      const auto& messages = conversations()[c];
      const std::string want = rendered_text(render_chat(kind, tokens, messages, false));
      EXPECT_EQ(render_jinja(source, messages, false), want)
          << chat_template_name(kind) << " conversation " << c;
    }
  }
}

TEST(BuiltinChatJinja, GenerationPromptIsTheAssistantHeader) {
  const std::vector<ChatMessage> user = {{"user", "Hi"}};
  EXPECT_EQ(render_jinja(builtin_chat_template_jinja(ChatTemplate::kChatml, {}), user, true),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(
      render_jinja(builtin_chat_template_jinja(ChatTemplate::kLlama3, {"<|begin_of_text|>", ""}),
                   user, true),
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nHi<|eot_id|>"
      "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render_jinja(builtin_chat_template_jinja(ChatTemplate::kLlama2, {"<s>", "</s>"}),
                         {{"system", "S"}, {"user", "Hi"}}, true),
            "<s>[INST] <<SYS>>\nS\n<</SYS>>\n\nHi [/INST]");
}

TEST(BuiltinChatJinja, Llama2RoleOrderRaises) {
  const std::string source = builtin_chat_template_jinja(ChatTemplate::kLlama2, {"<s>", "</s>"});
  const std::string message = error_of([&] {
    render_jinja(source, {{"user", "a"}, {"user", "b"}}, false);
  });
  EXPECT_NE(message.find("Conversation roles must be"), std::string::npos) << message;
}

}  // namespace
}  // namespace shardtrain
