// expect_same_model_config: gtest expectations that two ModelConfigs describe the same model,
// field by field (so a failure names the field). Header-only, for *_test.cpp files.
#pragma once

#include <gtest/gtest.h>

#include "model/model_config.h"

namespace shardtrain::testing {

// kNo: the torch_dtype may differ (an export writes float32 whatever the source was).
enum class CompareDtype { kYes, kNo };

inline void expect_same_model_config(const ModelConfig& a, const ModelConfig& b,
                                     CompareDtype dtype = CompareDtype::kYes) {
  EXPECT_EQ(a.model_type, b.model_type);
  EXPECT_EQ(a.vocab_size, b.vocab_size);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.intermediate_size, b.intermediate_size);
  EXPECT_EQ(a.num_hidden_layers, b.num_hidden_layers);
  EXPECT_EQ(a.num_attention_heads, b.num_attention_heads);
  EXPECT_EQ(a.num_key_value_heads, b.num_key_value_heads);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.max_position_embeddings, b.max_position_embeddings);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);  // exact: doubles must round-trip through JSON
  EXPECT_EQ(a.tie_word_embeddings, b.tie_word_embeddings);
  EXPECT_EQ(a.attention_bias, b.attention_bias);
  EXPECT_EQ(a.mlp_bias, b.mlp_bias);
  EXPECT_EQ(a.sliding_window, b.sliding_window);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.type, b.rope.type);
  if (a.rope.type == RopeType::kLlama3) {
    EXPECT_EQ(a.rope.factor, b.rope.factor);
    EXPECT_EQ(a.rope.low_freq_factor, b.rope.low_freq_factor);
    EXPECT_EQ(a.rope.high_freq_factor, b.rope.high_freq_factor);
    EXPECT_EQ(a.rope.original_max_position_embeddings, b.rope.original_max_position_embeddings);
  }
  if (a.rope.type == RopeType::kLinear) EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.hidden_activation, b.hidden_activation);
  EXPECT_EQ(a.layer_types, b.layer_types);
  if (!a.layer_types.empty()) {
    EXPECT_EQ(a.rope_local.theta, b.rope_local.theta);
    EXPECT_EQ(a.rope_local.type, b.rope_local.type);
  }
  EXPECT_EQ(a.query_pre_attn_scalar, b.query_pre_attn_scalar);
  EXPECT_EQ(a.attn_logit_softcapping, b.attn_logit_softcapping);
  EXPECT_EQ(a.final_logit_softcapping, b.final_logit_softcapping);
  EXPECT_EQ(a.bos_token_id, b.bos_token_id);
  EXPECT_EQ(a.eos_token_id, b.eos_token_id);
  EXPECT_EQ(a.pad_token_id, b.pad_token_id);
  if (dtype == CompareDtype::kYes) EXPECT_EQ(a.torch_dtype, b.torch_dtype);
}

}  // namespace shardtrain::testing
