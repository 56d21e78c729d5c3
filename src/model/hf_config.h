// Hugging Face config.json <-> ModelConfig.
//
// read_hf_config accepts the model_types of model/family_table.h (llama, qwen2, mistral, qwen3,
// gemma3_text, and the multimodal gemma3 whose `text_config` it reads) as written by
// transformers, old and new: rope as `rope_theta` + `rope_scaling` (null, or
// {"rope_type"|"type": "default"|"llama3"|"linear", ...}) or as the newer `rope_parameters`
// object (Gemma 3: one per layer type, or `rope_local_base_freq` for the local layers);
// `torch_dtype` or the newer `dtype`; `eos_token_id` as an integer or a list (the first is
// used). Defaults follow transformers where a key is optional; hidden_size, intermediate_size,
// num_hidden_layers, num_attention_heads and vocab_size are required; family defaults
// (max_position_embeddings, head_dim: qwen3's 128, gemma3's 256) come from the family table.
// Anything unsupported (model type, rope type, mlp_bias, a qwen sliding window, an activation
// other than silu, or than gelu_pytorch_tanh for Gemma, layer_types not one per layer), any key
// of the wrong JSON type and any file that is not JSON throws Error naming the file and the
// key. The result is validated (ModelConfig::validate) and always has head_dim set.
//
// write_hf_config_json produces a config.json that transformers loads, in the classic rope form
// (Gemma 3: transformers 5's layer_types and rope_parameters per layer type; a multimodal
// source is written as its text model, Gemma3ForCausalLM);
// read_hf_config(file holding write_hf_config_json(c)) == c for every valid c with head_dim set.
#pragma once

#include <string>

#include "model/model_config.h"

namespace shardtrain {

ModelConfig read_hf_config(const std::string& config_json_path);

std::string write_hf_config_json(const ModelConfig& config);

}  // namespace shardtrain
