// `shardtrain prepare`: tokenizes and packs a JSONL dataset into a token file (data/prepare.h)
// and prints the report.
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "data/formats.h"
#include "data/packing_mode.h"
#include "data/prepare.h"
#include "io/hub/hub_resolver.h"

namespace shardtrain::cli {
namespace {

void run_prepare(const PrepareOptions& given) {
  PrepareOptions options = given;
  options.tokenizer_path = resolve_hub_path(
      {given.tokenizer_path, "main", HubFiles::kConfigAndTokenizer, "prepare --tokenizer"});
  const PrepareReport report = prepare_dataset(options);
  std::fputs(format_report(report).c_str(), stdout);
}

}  // namespace

void add_prepare_command(CLI::App& app, int& exit_code) {
  const auto [cmd, options] = add_command<PrepareOptions>(
      app, exit_code, "prepare",
      "Tokenize a JSONL dataset (text, prompt/completion, alpaca or chat lines) on all cores and "
      "pack it into fixed-length sequences in a token file for training (docs/data.md)",
      run_prepare);
  cmd->add_option("--tokenizer", options->tokenizer_path,
                  "tokenizer.json, or a model directory containing it (and tokenizer_config.json), "
                  "or a Hub id org/name")
      ->required();
  cmd->add_option("--data", options->data_path, "input JSONL, one example per line")
      ->required()
      ->check(CLI::ExistingFile);
  cmd->add_option("--out", options->out_path, "token file to write (written atomically)")
      ->required();
  cmd->add_option("--seq-len", options->seq_len,
                  "tokens per packed sequence; must equal the training data.seq_len")
      ->capture_default_str();
  cmd->add_option("--format", options->format, "example format of the lines")
      ->check(CLI::IsMember(example_format_choices()))
      ->capture_default_str();
  cmd->add_option("--chat-template", options->chat_template,
                  "chat template for chat lines: auto = the model's own (tokenizer_config.json's "
                  "chat_template) when present, else the built-in one of its family; model; "
                  "chatml; llama2; llama3")
      ->check(CLI::IsMember(chat_template_choices()))
      ->capture_default_str();
  cmd->add_option("--overlong", options->overlong,
                  "examples longer than seq_len: split into pieces, truncate, or drop")
      ->check(CLI::IsMember({"split", "truncate", "drop"}))
      ->capture_default_str();
  cmd->add_option("--packing", options->packing,
                  "documents: packed examples attend only to themselves (the file records where "
                  "each begins); concatenate: the same file, read as one stream; none: one "
                  "example per sequence, padded")
      ->check(CLI::IsMember(packing_mode_choices()))
      ->capture_default_str();
  cmd->add_option("--on-bad-line", options->on_bad_line,
                  "a line that is not a valid example: fail, or skip it and count it")
      ->check(CLI::IsMember({"fail", "skip"}))
      ->capture_default_str();
  cmd->add_option("--invalid-utf8", options->invalid_utf8,
                  "invalid UTF-8 in a line: fail (a bad line), or replace it with U+FFFD")
      ->check(CLI::IsMember({"fail", "replace"}))
      ->capture_default_str();
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
