// LoraConfig: the [lora] section of a training config, and the names LoRA targets.
//
//   enabled         train LoRA adapters over a frozen base instead of the whole model
//   rank            r, the adapters' inner width (> 0)
//   alpha           lora_alpha; the adapter's output is scaled by alpha / r (alpha / sqrt(r)
//                   with use_rslora), as PEFT scales it
//   dropout         lora_dropout: dropout on the adapter's input, in training only ([0, 1))
//   target_modules  comma-separated module names as PEFT spells them (q_proj, k_proj, v_proj,
//                   o_proj, gate_proj, up_proj, down_proj) or "all-linear" (all seven; PEFT's
//                   all-linear leaves out the lm head, and so do we)
//   use_rslora      rank-stabilised scaling (alpha / sqrt(r))
//   adapter         a PEFT adapter directory to start from (adapter_config.json +
//                   adapter_model.safetensors): its r, lora_alpha, target_modules, use_rslora
//                   and lora_dropout replace the keys above (io: model/peft_adapter.h); "" = new
//                   adapters, A Kaiming-uniform as PEFT draws it, B zero
//
// Adapters of a linear with weight (O, I): lora_A (r, I) and lora_B (O, r), named as PEFT names
// them without its "base_model.model." prefix (lora_param_name).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "model/model_config.h"

namespace shardtrain {

struct LoraConfig {
  bool enabled = false;
  int64_t rank = 8;
  double alpha = 16;
  double dropout = 0.0;
  std::string target_modules = "all-linear";
  bool use_rslora = false;
  std::string adapter;

  void register_config(ConfigSchema& schema);
  // Throws Error naming the key: rank <= 0, dropout outside [0, 1), a target that is no module
  // of the model (the message lists the modules it has); with LoRA disabled, an adapter set
  // (the other keys of a disabled section are not checked).
  void validate() const;
  // With LoRA disabled, the keys whose values differ from the defaults (as a forgotten
  // lora.enabled = true leaves them: the train command warns); empty when enabled.
  std::vector<std::string> keys_set_while_disabled() const;
  // The adapter's output scale: alpha / r, or alpha / sqrt(r) with use_rslora.
  float scale() const;
  // The targeted modules in the model's order (all-linear resolved). REQUIRES: validate() passed.
  std::vector<std::string> modules() const;
  bool targets(const std::string& module) const;
};

// Throws Error (one line) for a model LoRA does not attach to: the dense llama, qwen2, qwen3,
// mistral and gemma3_text blocks are supported; MoE experts are not (make_param_layout refuses
// them), nor the text part of a multimodal checkpoint (gemma3), whose PEFT adapter names its
// modules under model.language_model and whose all-linear reaches the vision tower too.
void check_lora_supports(const ModelConfig& config);

// The linear modules of a decoder block LoRA can target, in Hugging Face module order.
const std::vector<std::string>& lora_module_names();

// "model.layers.3.self_attn.q_proj.lora_A.weight" for (3, "q_proj", 'A'): the module's path in
// the Hugging Face model plus PEFT's adapter suffix.
std::string lora_param_name(int64_t layer, const std::string& module, char which);
// The module's path inside a block: "self_attn.q_proj" or "mlp.down_proj".
std::string lora_module_path(const std::string& module);

}  // namespace shardtrain
