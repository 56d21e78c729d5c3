// `shardtrain export CKPT_DIR --out HF_DIR`: a sharded training checkpoint as a Hugging Face
// model dir, or, for a LoRA run, as a PEFT adapter dir; `--merge` writes a LoRA run as a whole
// model with the adapters folded into the base (train/checkpoint/checkpoint_export.h).
#include <cstdio>
#include <memory>
#include <string>

#include "cli/commands.h"
#include "io/hub/hub_resolver.h"
#include "train/checkpoint/checkpoint_export.h"

namespace shardtrain::cli {
namespace {

struct ExportArgs {
  std::string checkpoint, out_dir, dtype = "auto", max_shard_size = "5GB", tokenizer;
  bool merge = false;
  std::string revision = "main";  // of --tokenizer when it is a Hub id
};

void run_export(const ExportArgs& args) {
  ExportOptions options;
  options.dtype = args.dtype;
  options.tokenizer_dir = resolve_hub_path(
      {args.tokenizer, args.revision, HubFiles::kConfigAndTokenizer, "export --tokenizer"});
  options.max_shard_bytes = parse_byte_size(args.max_shard_size, "--max-shard-size");
  options.merge_lora = args.merge;
  const ExportResult result = export_checkpoint(args.checkpoint, args.out_dir, options);
  std::printf("exported %s (step %lld) to %s%s%s\n", result.step_dir.c_str(),
              static_cast<long long>(result.step), args.out_dir.c_str(),
              result.lora ? (args.merge ? " (LoRA merged into the base)" : " (PEFT LoRA adapter)")
                          : "",
              result.copied_files.empty() ? "" : " with tokenizer files");
}

}  // namespace

void add_export_command(CLI::App& app, int& exit_code) {
  const auto [cmd, args] = add_command<ExportArgs>(
      app, exit_code, "export", "Write a Hugging Face model dir from a sharded training checkpoint",
      run_export);
  cmd->add_option("checkpoint", args->checkpoint,
                  "a step_XXXXXXXX checkpoint, or a checkpoint dir (its newest complete one)")
      ->required();
  cmd->add_option("--out", args->out_dir, "output Hugging Face dir (replaced atomically)")
      ->required();
  cmd->add_option("--dtype", args->dtype,
                  "weight dtype: bf16, fp32, or auto (the run's model.dtype)")
      ->check(CLI::IsMember({"auto", "bf16", "fp32"}));
  cmd->add_option("--max-shard-size", args->max_shard_size,
                  "split weights into files of at most this size, with an index (default 5GB)");
  cmd->add_option("--tokenizer", args->tokenizer,
                  "copy the tokenizer files from this dir or Hub id org/name (default: the run's "
                  "data.tokenizer or model.path)");
  cmd->add_option("--revision", args->revision,
                  "--tokenizer as a Hub id only: branch, tag or commit (default main)");
  cmd->add_flag("--merge", args->merge,
                "LoRA runs: write the base model with the adapters merged in (W + scale B A), "
                "not the adapter");
}

}  // namespace shardtrain::cli
