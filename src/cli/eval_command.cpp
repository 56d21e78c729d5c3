// `shardtrain eval --model DIR --data PATH`: mean next-token cross-entropy of a checkpoint on a
// dataset, over every predicted position (the labels the data gives: input_ids unless masked),
// as transformers computes it with labels. Last line: {"loss": L, "tokens": N, "ppl": P}.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "cli/commands.h"
#include "core/error.h"
#include "data/batch.h"
#include "data/dataset.h"
#include "model/llama_model.h"
#include "train/inference_model.h"

namespace shardtrain::cli {
namespace {

struct EvalArgs {
  std::string model_dir, data_path, format = "auto", device = "auto";
  int64_t seq_len = 0, batch = 4, max_sequences = 0;
};

int run_eval(const EvalArgs& args) {
  InferenceModel loaded = load_inference_model(args.model_dir, args.device);
  LlamaModel& model = *loaded.model;
  Ops* ops = loaded.ops.get();
  const ModelConfig& model_config = model.config();
  const int64_t seq_len =
      args.seq_len > 0 ? args.seq_len : std::min<int64_t>(model_config.max_position_embeddings, 2048);
  std::unique_ptr<SequenceDataset> dataset = open_dataset(args.data_path, args.format, seq_len, 0);
  validate_vocab(*dataset, model_config.vocab_size, args.data_path);
  model.reserve(args.batch, seq_len);
  LocalUnits& units = *loaded.units;

  DeviceBuffer loss_buffer(*ops, sizeof(float));
  const Tensor loss_sum = loss_buffer.view(DType::kF32, {1});
  double total_loss = 0;
  int64_t total_targets = 0;
  size_t sequences = dataset->size();
  if (args.max_sequences > 0) sequences = std::min(sequences, static_cast<size_t>(args.max_sequences));
  for (size_t begin = 0; begin < sequences; begin += static_cast<size_t>(args.batch)) {
    std::vector<Example> examples;
    for (size_t i = begin; i < std::min(sequences, begin + args.batch); ++i)
      examples.push_back(dataset->get(i));
    const Batch batch = make_batch(examples);
    model.set_batch(batch);
    ops->fill_zero(loss_sum);
    model.forward(units, loss_sum, nullptr);
    total_loss += ops->read_scalar(loss_sum);
    total_targets += batch.target_count;
  }
  if (total_targets == 0) {
    fail("data {} has no predicted positions (every label is ignored); HINT: check the labels",
         args.data_path);
  }
  const double loss = total_loss / static_cast<double>(total_targets);
  const nlohmann::json result = {{"loss", loss}, {"tokens", total_targets}, {"ppl", std::exp(loss)}};
  std::printf("%s\n", result.dump().c_str());
  return 0;
}

}  // namespace

void add_eval_command(CLI::App& app, int& exit_code) {
  auto args = std::make_shared<EvalArgs>();
  CLI::App* cmd = app.add_subcommand(
      "eval", "Mean next-token cross-entropy of a Hugging Face checkpoint on a dataset");
  cmd->add_option("--model", args->model_dir, "Hugging Face checkpoint dir")->required();
  cmd->add_option("--data", args->data_path, "token file (.bin) or JSONL with input_ids")
      ->required();
  cmd->add_option("--format", args->format, "data format")
      ->check(CLI::IsMember({"auto", "tokens", "jsonl"}));
  cmd->add_option("--seq-len", args->seq_len,
                  "sequence length (default: min(max_position_embeddings, 2048))");
  cmd->add_option("--batch", args->batch, "sequences per forward pass")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--max-sequences", args->max_sequences,
                  "evaluate only the first N sequences (0 = all)");
  cmd->add_option("--device", args->device, "cpu, cuda or auto")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  cmd->callback([args, &exit_code] { exit_code = run_eval(*args); });
}

}  // namespace shardtrain::cli
