// `shardtrain prepare`: tokenizes and packs a JSONL dataset into a token file (data/prepare.h)
// and prints the report.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/choice_option.h"
#include "cli/commands.h"
#include "data/formats.h"
#include "data/packing_mode.h"
#include "data/prepare.h"
#include "io/hub/hub_resolver.h"

namespace shardtrain::cli {
namespace {

// revision: of --tokenizer when it is a Hub id.
void run_prepare(const PrepareOptions& given, const std::string& revision) {
  PrepareOptions options = given;
  options.tokenizer_path = resolve_hub_path(
      {given.tokenizer_path, revision, HubFiles::kConfigAndTokenizer, "prepare --tokenizer"});
  const PrepareReport report = prepare_dataset(options);
  std::fputs(format_report(report).c_str(), stdout);
}

}  // namespace

void add_prepare_command(CLI::App& app, int& exit_code) {
  auto revision = std::make_shared<std::string>("main");
  const auto [cmd, options] = add_command<PrepareOptions>(
      app, exit_code, "prepare",
      "Tokenize a JSONL dataset (text, prompt/completion, alpaca or chat lines) on all cores and "
      "pack it into fixed-length sequences in a token file for training (docs/data.md)",
      [revision](const PrepareOptions& options) { run_prepare(options, *revision); });
  cmd->add_option("--tokenizer", options->tokenizer_path,
                  "tokenizer.json, or a model directory containing it (and tokenizer_config.json), "
                  "or a Hub id org/name")
      ->required();
  cmd->add_option("--revision", *revision,
                  "--tokenizer as a Hub id only: branch, tag or commit (default main)");
  cmd->add_option("--data", options->data_path, "input JSONL, one example per line")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", options->out_path, "token file to write (written atomically)")
      ->required();
  cmd->add_option("--seq-len", options->seq_len,
                  "tokens per packed sequence; must equal the training data.seq_len")
      ->capture_default_str();
  add_choice_option(cmd, "--format", options->format, example_format_choice_names(),
                    "example format of the lines");
  add_choice_option(cmd, "--chat-template", options->chat_template, chat_template_choice_names(),
                    "chat template for chat lines: auto = the model's own (tokenizer_config.json's "
                    "chat_template) when present, else the built-in one of its family; model; "
                    "chatml; llama2; llama3");
  add_choice_option(cmd, "--overlong", options->overlong, overlong_policy_names(),
                    "examples longer than seq_len: split into pieces, truncate, or drop");
  add_choice_option(cmd, "--packing", options->packing, packing_mode_names(),
                    "documents: packed examples attend only to themselves (the file records where "
                    "each begins); concatenate: the same file, read as one stream; none: one "
                    "example per sequence, padded");
  add_choice_option(cmd, "--on-bad-line", options->on_bad_line, bad_line_policy_names(),
                    "a line that is not a valid example: fail, or skip it and count it");
  add_choice_option(cmd, "--invalid-utf8", options->invalid_utf8, invalid_utf8_policy_names(),
                    "invalid UTF-8 in a line: fail (a bad line), or replace it with U+FFFD");
  cmd->add_flag("--train-on-prompt", options->train_on_prompt,
                "compute the loss on prompt/user tokens too (default: completion/assistant only)");
  cmd->add_option("--train-on-eos", options->train_on_eos,
                  "model's chat template: train each assistant turn's end-of-turn marker")
      ->capture_default_str();
  cmd->add_option("--seed", options->seed, "seed of the document shuffle before packing")
      ->capture_default_str();
  cmd->add_option("--eos-token", options->eos_token,
                  "document separator token (default: tokenizer_config.json's eos_token)");
  cmd->add_option("--threads", options->threads,
                  "tokenizer threads; 0 = all cores (the output does not depend on it)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
}

}  // namespace shardtrain::cli
