// LlamaModel: the Llama-family decoder (llama, qwen2, mistral) with a hand-written backward.
//
// The model owns its activation memory and the rope tables, and computes through `Ops` only,
// so the same code runs on the CPU reference backend and on CUDA. Parameters and gradients
// come from a UnitAccess (model/unit_access.h), unit by unit, so FSDP can gather and reduce
// around each unit without the model knowing.
//
// Usage: reserve(B, T) once for the largest micro-batch, then per micro-batch
// set_batch(batch) and forward_backward(...) (training) or forward(...) (eval, logits).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "data/batch.h"
#include "model/model_config.h"
#include "model/param_layout.h"
#include "model/unit_access.h"
#include "model/weights.h"
#include "ops/device_buffer.h"
#include "ops/ops.h"

namespace shardtrain {

class LlamaModel {
 public:
  LlamaModel(const ModelConfig& config, Ops& ops);
  LlamaModel(const LlamaModel&) = delete;
  LlamaModel& operator=(const LlamaModel&) = delete;

  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  int unit_count() const { return static_cast<int>(layout_.units.size()); }

  // Activation checkpointing (train.activation_checkpointing), per block:
  //   kFull: keep only each block's input in forward and recompute the block in backward (one
  //     extra block forward per block but the last; activation memory of one block plus L block
  //     inputs);
  //   kSelective: also keep each block's attention output and log-sum-exp, so the recompute
  //     skips attention, the costliest op to redo (Megatron's "selective" recomputation).
  // REQUIRES: called before reserve().
  enum class Checkpointing { kNone, kFull, kSelective };
  // "none" | "full" | "selective" (the config values; validated by the config schema).
  static Checkpointing checkpointing_from_name(const std::string& name);
  void set_activation_checkpointing(Checkpointing mode) { checkpointing_ = mode; }
  Checkpointing activation_checkpointing() const { return checkpointing_; }

  // The lm head and loss run over chunks of at most this many logits (rows x vocab; at least
  // one row per chunk), so peak memory does not grow with tokens x vocab. Tests lower it to
  // exercise several chunks on tiny models. REQUIRES: called before reserve().
  // 448M logits (896 MB in bf16): the Qwen2.5-1.5B benchmark's 8192 tokens go in 3 chunks of
  // <= 2816 rows. Each chunk's weight-gradient GEMM re-reads and re-writes the fp32 head gradient,
  // so fewer chunks are cheaper; measured on the H200 (head forward + backward per 8192 tokens,
  // vocab 151936): 1664-row chunks 16.6 ms, 2816 15.0 ms, 4096 17.5 ms (cuBLASLt's choice there
  // is slower).
  static constexpr int64_t kDefaultHeadChunkLogits = int64_t{448} << 20;
  void set_head_chunk_logits(int64_t max_logits) { head_chunk_logits_ = max_logits; }

  // Allocates activations for micro-batches up to (batch, seq_len). Throws Error if seq_len
  // exceeds max_position_embeddings or a mistral sliding window.
  void reserve(int64_t batch, int64_t seq_len);
  // Activation memory reserve() takes for this shape: a pure function, so `shardtrain plan`
  // can report it before anything runs.
  static size_t activation_bytes_for(const ModelConfig& config, int64_t batch, int64_t seq_len,
                                     DType activation_dtype, Checkpointing checkpointing,
                                     int64_t head_chunk_logits = kDefaultHeadChunkLogits);
  // The same bytes by what they hold (their sum is activation_bytes_for).
  struct ActivationBytes {
    size_t block_sets = 0;   // every block's saved activations (one shared set if checkpointed)
    size_t checkpoints = 0;  // what checkpointing keeps per block (inputs; selective: + attn)
    size_t head_logits = 0;  // one lm-head chunk of logits (rows x vocab)
    size_t scratch = 0;      // backward's gradient buffers, the final norm, the rest
    size_t total() const { return block_sets + checkpoints + head_logits + scratch; }
  };
  static ActivationBytes activation_breakdown_for(
      const ModelConfig& config, int64_t batch, int64_t seq_len, DType activation_dtype,
      Checkpointing checkpointing, int64_t head_chunk_logits = kDefaultHeadChunkLogits);
  // Bytes of activation memory reserved.
  size_t activation_bytes() const { return arena_.capacity(); }

  // Copies a micro-batch to the device. REQUIRES: batch shape fits reserve(); ids < vocab.
  void set_batch(const Batch& batch);

  // Forward and backward of the current batch. Parameter gradients accumulate into the
  // UnitAccess grad buffers, scaled by grad_scale (1 / number of targets in the global batch).
  // loss_sum_1 (f32 [1], device) += sum of per-target cross-entropy.
  void forward_backward(UnitAccess& units, float grad_scale, Tensor loss_sum_1);

  // Forward only. loss_sum_1 += summed cross-entropy when defined; logits_host_NV (fp32,
  // N = B*T rows of V) receives the logits when non-null.
  void forward(UnitAccess& units, Tensor loss_sum_1, float* logits_host_NV);
  // Forward only, returning just the logits of each sequence's last position (B rows of V)
  // for generation: the lm head runs on B rows instead of B*T.
  void forward_last_logits(UnitAccess& units, float* logits_host_BV);

 private:
  struct BlockActivations {
    Tensor x_in_NC;                 // block input (residual stream)
    Tensor ln1_NC, rstd1_N;         // input_layernorm output and its 1/rms
    Tensor q_NHD, k_NKD, v_NKD;     // projections, q and k after rope
    Tensor attn_NHD, lse_BHT;       // attention output, log-sum-exp
    Tensor h_NC;                    // residual after attention
    Tensor ln2_NC, rstd2_N;         // post_attention_layernorm output
    Tensor gate_NF, up_NF, act_NF;  // MLP
  };
  struct Scratch {
    Tensor dresid_NC, dln_NC, dattn_NHD, dq_NHD, dk_NKD, dv_NKD, dgate_NF, dup_NF, dact_NF;
    Tensor qkv_NX;  // packed q/k/v projection output (forward) and its gradient (backward)
    Tensor xf_NC, rstdf_N, dxf_NC, logits_chunk;  // final norm + head
    Tensor out_NC;                                // output of the last block
  };

  // Views of a block's activations shaped for the current batch (<= the reserved one).
  BlockActivations sized_for_batch(const BlockActivations& a) const;
  void embed_forward(const RootWeights& root, Tensor out_NC);
  // Forward of one block; with reuse_attention (selective recompute), a.attn_NHD and
  // a.lse_BHT already hold the attention output and the attention is not run.
  void block_forward(const BlockWeights& w, BlockActivations& a, Tensor out_NC,
                     bool reuse_attention = false);
  // Backward of one block into g: every gradient is added to (accumulate) or overwritten.
  void block_backward(const BlockWeights& w, const BlockWeights& g, bool accumulate,
                      BlockActivations& a, Tensor dresid_NC);
  // Final norm, lm head and loss over token chunks; with grads, writes d(last block output)
  // into scratch_.dresid_NC and adds to (accumulate_grads) or overwrites the head gradients.
  void head(const RootWeights& root, const RootWeights* root_grads, bool accumulate_grads,
            float grad_scale, Tensor loss_sum_1, float* logits_host_NV);
  Tensor block_output(int64_t layer);
  // Embedding and every block for the current batch; returns the (still acquired) root
  // weights, which the caller releases after the head.
  RootWeights forward_blocks(UnitAccess& units);
  void copy_logits_to_host(Tensor logits, float* host);
  // Where block `layer` keeps its activations: its own set, or (checkpointing) the shared
  // recompute set pointed at the block's saved input.
  BlockActivations& block_storage(int64_t layer);

  ModelConfig config_;
  ParamLayout layout_;
  Ops& ops_;
  int64_t reserved_batch_ = 0, reserved_seq_ = 0;
  int64_t batch_ = 0, seq_ = 0;
  int64_t chunk_rows_ = 0;
  int64_t head_chunk_logits_ = kDefaultHeadChunkLogits;
  Arena arena_;
  Checkpointing checkpointing_ = Checkpointing::kNone;
  // Per block: everything; with checkpointing only x_in_NC (kFull) or x_in_NC, attn_NHD and
  // lse_BHT (kSelective).
  std::vector<BlockActivations> acts_;
  BlockActivations recompute_;  // checkpointing: the one recomputed block
  Scratch scratch_;
  Tensor ids_N_, targets_N_, positions_N_;
  DeviceBuffer rope_cos_, rope_sin_;
  Tensor rope_cos_PR_, rope_sin_PR_;
};

}  // namespace shardtrain
