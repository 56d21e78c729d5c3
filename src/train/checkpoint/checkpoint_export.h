// Export of a sharded training checkpoint (train/checkpoint/checkpoint.h). A LoRA run's checkpoint
// (lora.enabled in its recorded config) is written as a PEFT adapter dir (adapter_config.json,
// adapter_model.safetensors, the tokenizer files: model/peft_adapter.h), or with merge_lora as
// the whole model with the adapters merged into the base (W + scale B A), the base read from the
// run's model.path. Otherwise, a Hugging Face model
// dir: config.json (the model config saved in the checkpoint), the fp32 master weights in bf16 or
// fp32 (split into model-0000K-of-0000N.safetensors + index when over max_shard_bytes), the
// tokenizer files of the run's tokenizer (data.tokenizer or model.path, recorded as absolute
// paths; or ExportOptions::tokenizer_dir) when that directory still holds them, and the chat
// template training used (train/checkpoint/export_tokenizer.h).
//
// Streaming: each unit is assembled from the saved shards that cover it (any saved world size),
// written tensor by tensor, and dropped; peak host memory is one unit's fp32 values. Every shard
// file read is verified against the manifest first. One process, no communication.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace shardtrain {

struct ExportOptions {
  std::string dtype = "auto";  // "bf16" | "fp32" | "auto" (the run's model.dtype)
  uint64_t max_shard_bytes = 5'000'000'000;
  // Tokenizer files from this dir instead of the run's (train/checkpoint/export_tokenizer.h).
  std::string tokenizer_dir;
  // LoRA runs: the base with the adapters merged in instead of the adapter. A checkpoint of a
  // run without LoRA is refused (Error).
  bool merge_lora = false;
};

struct ExportResult {
  std::string step_dir;  // the checkpoint exported
  int64_t step = 0;
  bool lora = false;  // a LoRA run's checkpoint
  std::vector<std::string> copied_files;  // tokenizer files copied (and chat_template.jinja
                                          // when a built-in template was written)
};

// `checkpoint` is a step_XXXXXXXX dir or a checkpoint dir (its newest complete checkpoint).
// Throws Error naming the path for a missing/incomplete/damaged checkpoint.
ExportResult export_checkpoint(const std::string& checkpoint, const std::string& out_dir,
                               const ExportOptions& options);

// "5GB", "500MB", "64KB", "1GiB", "123" (bytes) -> bytes; throws Error naming `what`.
uint64_t parse_byte_size(const std::string& text, const std::string& what);

}  // namespace shardtrain
