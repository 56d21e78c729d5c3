// LayerDims: the sizes a layer's tensors are made of, for one micro-batch shape (B, T) of one
// model; fit(): a tensor reserved for the largest micro-batch viewed at the current one.
#pragma once

#include <cstdint>

#include "core/error.h"
#include "core/tensor.h"
#include "model/model_config.h"

namespace shardtrain {

struct LayerDims {
  int64_t batch = 0, seq = 0;  // B, T
  int64_t hidden = 0;          // C
  int64_t intermediate = 0;    // F
  int64_t heads = 0;           // H
  int64_t kv_heads = 0;        // K
  int64_t head_dim = 0;        // D
  int64_t vocab = 0;           // V
  // Mixture of experts (0 for a dense model): E experts, k per token, each expert's F.
  int64_t experts = 0, experts_per_token = 0, expert_intermediate = 0;

  static LayerDims of(const ModelConfig& c, int64_t batch, int64_t seq) {
    return LayerDims{batch,
                     seq,
                     c.hidden_size,
                     // A model whose blocks are all sparse has no dense MLP to size.
                     c.moe.sparse_layer_count(c.num_hidden_layers) == c.num_hidden_layers
                         ? 0
                         : c.intermediate_size,
                     c.num_attention_heads,
                     c.num_key_value_heads,
                     c.head_dim,
                     c.vocab_size,
                     c.moe.num_experts,
                     c.moe.experts_per_token,
                     c.moe.expert_intermediate};
  }
  int64_t tokens() const { return batch * seq; }            // N
  int64_t q_width() const { return heads * head_dim; }      // H*D
  int64_t kv_width() const { return kv_heads * head_dim; }  // K*D
  int64_t routed_rows() const { return tokens() * experts_per_token; }  // M = N*k
};

// The first shape.numel() elements of `t`, viewed with `shape`.
inline Tensor fit(const Tensor& t, Shape shape) {
  SHARDTRAIN_CHECK(shape.numel() <= t.numel(), "{} does not fit {}", shape.to_string(),
                   t.shape().to_string());
  return Tensor(t.data(), t.dtype(), shape, t.device());
}

}  // namespace shardtrain
