// `shardtrain render --tokenizer DIR [--add-generation-prompt]`: chat JSONL on stdin, one JSON
// string per line on stdout: exactly what transformers'
// tokenizer.apply_chat_template(messages, tools=tools, tokenize=False, **kwargs) returns, using
// the model's own chat template (data/hf_chat_template.h).
// Each input line: {"messages": [...], "tools": [...] (optional),
// "chat_template_kwargs": {...} (optional extra template variables)}; blank lines are skipped.
// Errors (exit 2, one line): a line that is not such an object names "stdin:LINE"; a template
// error names the template file, the template line/column and "stdin:LINE"; a tokenizer
// without a chat template says so.
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "data/hf_chat_template.h"
#include "data/jsonl_lines.h"
#include "data/tokenizer_files.h"

namespace shardtrain::cli {
namespace {

struct RenderArgs {
  std::string tokenizer_path;
  bool add_generation_prompt = false;
};

ChatRenderInput parse_line(const std::string& line, size_t line_number, bool generation_prompt) {
  nlohmann::ordered_json record;
  check_json_nesting(line, fmt::format("stdin:{}", line_number));
  try {
    record = nlohmann::ordered_json::parse(line);
  } catch (const nlohmann::json::exception& error) {
    fail("stdin:{}: not valid JSON ({}); each line must be {{\"messages\": [...]}}", line_number,
         error.what());
  }
  if (!record.is_object() || !record.contains("messages") || !record["messages"].is_array()) {
    fail("stdin:{}: expected {{\"messages\": [{{\"role\": ..., \"content\": ...}}, ...]}}",
         line_number);
  }
  ChatRenderInput input;
  input.messages = record["messages"];
  input.add_generation_prompt = generation_prompt;
  if (record.contains("tools") && !record["tools"].is_null()) {
    if (!record["tools"].is_array()) fail("stdin:{}: \"tools\" must be a list", line_number);
    input.tools = record["tools"];
  }
  if (record.contains("chat_template_kwargs")) {
    if (!record["chat_template_kwargs"].is_object()) {
      fail("stdin:{}: \"chat_template_kwargs\" must be an object", line_number);
    }
    input.extra = record["chat_template_kwargs"];
  }
  return input;
}

void run_render(const RenderArgs& args) {
  const TokenizerFiles files = locate_chat_template(args.tokenizer_path);
  const std::optional<HfChatTemplate> chat_template = HfChatTemplate::load(files);
  if (!chat_template) {
    fail(
        "{}: the tokenizer has no chat_template (tokenizer_config.json or chat_template.jinja); "
        "render needs the model's own template",
        files.config_json.empty() ? args.tokenizer_path : files.config_json);
  }
  std::string line;
  for (size_t line_number = 1; read_jsonl_line(std::cin, line, "stdin", line_number);
       ++line_number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const ChatRenderInput input = parse_line(line, line_number, args.add_generation_prompt);
    std::string text;
    try {
      text = chat_template->render(input).text;
    } catch (const Error& error) {
      fail("{} (conversation at stdin:{})", error.what(), line_number);
    }
    const std::string out = nlohmann::ordered_json(text).dump(
                                -1, ' ', false, nlohmann::json::error_handler_t::replace) +
                            "\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
}

}  // namespace

void add_render_command(CLI::App& app, int& exit_code) {
  const auto [cmd, args] = add_command<RenderArgs>(
      app, exit_code, "render",
      "Render chat JSONL {\"messages\": ...} from stdin with the model's own chat template; "
      "print one JSON string per line (transformers' apply_chat_template, tokenize=False)",
      run_render);
  cmd->add_option("--tokenizer", args->tokenizer_path,
                  "model directory (or tokenizer.json) whose tokenizer_config.json has the "
                  "chat_template")
      ->required();
  cmd->add_flag("--add-generation-prompt", args->add_generation_prompt,
                "end with the assistant header, as for generation");
}

}  // namespace shardtrain::cli
