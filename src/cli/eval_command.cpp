// `shardtrain eval --model DIR --data PATH`: mean next-token cross-entropy of a checkpoint on a
// dataset, over every predicted position (the labels the data gives: input_ids unless masked),
// as transformers computes it with labels (the loop is the trainer's, train/evaluator.h).
// Last line: {"loss": L, "tokens": N, "ppl": P}.
// The data is anything `train` reads (train/training_data.h): a token file, JSONL with
// input_ids, or raw examples (text, prompt/completion, alpaca, chat), tokenized with the model's
// tokenizer (or --tokenizer) and packed at --seq-len into the prepare cache. --seq-len defaults
// to the length a token file was packed at (recorded since token file version 2), else
// min(max_position_embeddings, 2048).
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/choice_option.h"
#include "cli/commands.h"
#include "core/error.h"
#include "core/log.h"
#include "data/data_limits.h"
#include "data/dataset.h"
#include "data/formats.h"
#include "data/packing_mode.h"
#include "data/token_file.h"
#include "io/hub/hub_resolver.h"
#include "model/decoder_model.h"
#include "train/evaluator.h"
#include "train/inference_model.h"
#include "train/training_data.h"

namespace shardtrain::cli {
namespace {

struct EvalArgs {
  std::string model_dir, data_path, tokenizer, cache_dir;
  std::string adapter;  // a PEFT LoRA adapter dir run on the base (--adapter)
  DataFormat format = DataFormat::kAuto;
  DeviceChoice device = DeviceChoice::kAuto;
  ExampleFormatChoice example_format;
  ChatTemplateChoice chat_template = ChatTemplateChoice::kAuto;
  PackingChoice packing;
  std::string revision = "main";  // of --model when it is a Hub id
  int64_t seq_len = 0, batch = 4, max_sequences = 0;
};

// --seq-len, else what a token file recorded, else the model's context capped at 2048.
int64_t eval_seq_len(const EvalArgs& args, const DataConfig& data, const ModelConfig& model) {
  if (args.seq_len > 0) return args.seq_len;
  std::error_code ec;
  if (std::filesystem::is_regular_file(args.data_path, ec) &&
      resolve_training_data_format(data) == DataFormat::kTokens) {
    const uint64_t packed = TokenFile(args.data_path).packed_seq_len();
    if (packed > 0) return static_cast<int64_t>(packed);
  }
  return std::min<int64_t>(model.max_position_embeddings, 2048);
}

void run_eval(const EvalArgs& args) {
  const std::string model_dir =
      resolve_hub_path({args.model_dir, args.revision, HubFiles::kModel, "eval --model"});
  InferenceModel loaded = load_inference_model(model_dir, args.device, args.adapter);
  DecoderModel& model = *loaded.model;
  Ops* ops = loaded.ops.get();
  const ModelConfig& model_config = model.config();
  DataConfig data;
  data.path = args.data_path;
  data.format = args.format;
  data.tokenizer = args.tokenizer;
  data.example_format = args.example_format;
  data.chat_template = args.chat_template;
  data.cache_dir = args.cache_dir;
  data.packing = args.packing;
  data = with_packing_resolved(data);
  const int64_t seq_len = eval_seq_len(args, data, model_config);
  if (seq_len < 2 || seq_len > data_limits::kMaxSeqLen) {
    fail(
        "sequence length {} (--seq-len, else the token file's or the model's) is outside [2, "
        "{}]; HINT: pass --seq-len in that range",
        seq_len, data_limits::kMaxSeqLen);
  }
  if (args.batch > data_limits::kMaxBatchTokens / seq_len) {
    fail("--batch {} x --seq-len {} exceed {} tokens per forward pass; HINT: lower --batch",
         args.batch, seq_len, data_limits::kMaxBatchTokens);
  }
  data.seq_len = seq_len;
  std::unique_ptr<SequenceDataset> dataset = open_training_data(data, model_dir, 0);
  validate_vocab(*dataset, model_config.vocab_size, args.data_path);
  log::info("data {}: {} sequences of {} tokens", args.data_path, dataset->size(), seq_len);
  model.reserve(args.batch, seq_len);
  LocalUnits& units = *loaded.units;

  DeviceBuffer loss_buffer(*ops, sizeof(float));
  size_t sequences = dataset->size();
  if (args.max_sequences > 0)
    sequences = std::min(sequences, static_cast<size_t>(args.max_sequences));
  const EvalTotals totals =
      evaluate_share(model, units, *ops, *dataset, {sequences, static_cast<size_t>(args.batch)},
                     loss_buffer.view(DType::kF32, {1}));
  if (totals.targets == 0) {
    fail("data {} has no predicted positions (every label is ignored); HINT: check the labels",
         args.data_path);
  }
  const double loss = eval_report(totals, 0, 0).loss;
  const nlohmann::json result = {
      {"loss", loss}, {"tokens", totals.targets}, {"ppl", std::exp(loss)}};
  std::printf("%s\n", result.dump().c_str());
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_code) {
  const auto [cmd, args] = add_command<EvalArgs>(
      app, exit_code, "eval",
      "Mean next-token cross-entropy of a Hugging Face checkpoint on a dataset", run_eval);
  cmd->add_option("--model", args->model_dir, "Hugging Face checkpoint dir, or a Hub id org/name")
      ->required();
  cmd->add_option("--revision", args->revision,
                  "Hub id only: branch, tag or commit (default main)");
  cmd->add_option("--adapter", args->adapter,
                  "a PEFT LoRA adapter dir (adapter_config.json + adapter_model.safetensors) "
                  "to run on the --model base");
  cmd->add_option("--data", args->data_path,
                  "what train reads: token file (.bin), JSONL with input_ids, or raw examples "
                  "(text, prompt/completion, alpaca, chat JSONL)")
      ->required();
  add_choice_option(cmd, "--format", args->format, data_format_names(),
                    "data format (as data.format)");
  cmd->add_option("--seq-len", args->seq_len,
                  "sequence length (default: what the token file was packed at, else "
                  "min(max_position_embeddings, 2048))")
      ->check(CLI::NonNegativeNumber);
  add_choice_option(cmd, "--packing", args->packing, packing_choice_names(),
                    "as data.packing: auto (documents), documents (each packed document alone), "
                    "concatenate, none");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "raw examples: tokenizer.json or its dir (default: --model)");
  add_choice_option(cmd, "--example-format", args->example_format, example_format_choice_names(),
                    "raw examples: as data.example_format");
  add_choice_option(cmd, "--chat-template", args->chat_template, chat_template_choice_names(),
                    "raw chat examples: as data.chat_template");
  cmd->add_option("--cache-dir", args->cache_dir,
                  "raw examples: where prepared token files are cached (default "
                  "~/.cache/shardtrain/data)");
  cmd->add_option("--batch", args->batch, "sequences per forward pass")->check(CLI::PositiveNumber);
  cmd->add_option("--max-sequences", args->max_sequences,
                  "evaluate only the first N sequences (0 = all)")
      ->check(CLI::NonNegativeNumber);
  add_choice_option(cmd, "--device", args->device, device_choice_names(), "cpu, cuda or auto");
}

}  // namespace shardtrain::cli
