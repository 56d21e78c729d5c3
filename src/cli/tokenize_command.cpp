// `shardtrain tokenize`: JSONL {"text": ...} lines on stdin -> one JSON array of token ids per
// line on stdout. Without --add-special-tokens no BOS/EOS is added (Hugging Face's
// encode(text, add_special_tokens=False)). A line that is not {"text": string} is an Error naming
// "stdin:LINE".
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "core/error.h"
#include "core/json_depth.h"
#include "core/json_message.h"
#include "data/jsonl_lines.h"
#include "data/tokenizer/tokenizer.h"
#include "data/tokenizer_files.h"

namespace shardtrain::cli {
namespace {

struct TokenizeArgs {
  std::string tokenizer_path;
  bool add_special_tokens = false;
};

void run_tokenize(const TokenizeArgs& args) {
  const Tokenizer tokenizer = Tokenizer::load(locate_tokenizer(args.tokenizer_path).tokenizer_json);
  std::string line;
  std::string out;
  for (size_t line_number = 1; read_jsonl_line(std::cin, line, "stdin", line_number);
       ++line_number) {
    nlohmann::json record;
    check_json_nesting(line, fmt::format("stdin:{}", line_number));
    try {
      record = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception& error) {
      fail("stdin:{}: not valid JSON ({}); each line must be {{\"text\": \"...\"}}", line_number,
           json_message(error));
    }
    const auto text = record.is_object() ? record.find("text") : record.end();
    if (!record.is_object() || text == record.end() || !text->is_string()) {
      fail("stdin:{}: expected {{\"text\": \"...\"}} with a string \"text\"", line_number);
    }
    const std::vector<int32_t> ids =
        tokenizer.encode(text->get_ref<const std::string&>(), args.add_special_tokens);
    out.clear();
    out += '[';
    for (size_t i = 0; i < ids.size(); ++i) {
      if (i > 0) out += ',';
      out += std::to_string(ids[i]);
    }
    out += "]\n";
    std::fwrite(out.data(), 1, out.size(), stdout);
  }
}

}  // namespace

void add_tokenize_command(CLI::App& app, int& exit_code) {
  const auto [cmd, args] = add_command<TokenizeArgs>(
      app, exit_code, "tokenize",
      "Tokenize JSONL {\"text\": ...} lines from stdin; print one JSON array of ids "
      "per line",
      run_tokenize);
  cmd->add_option("--tokenizer", args->tokenizer_path,
                  "tokenizer.json, or a model directory containing it")
      ->required();
  cmd->add_flag("--add-special-tokens", args->add_special_tokens,
                "add BOS/EOS as the tokenizer's post-processor says (default: none)");
}

}  // namespace shardtrain::cli
